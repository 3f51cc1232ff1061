#version 460
#include "common.glsl"
#include "elementwise.glsl"
layout(local_size_x = CW_LOCAL) in;

void main() {
  F32 a = F32(pc.a), b = F32(pc.b), o = F32(pc.dst);
  CW_FOR_EACH(i) {
    // x, y: an operand repeated as a row of that many elements (0: dense).
    const float x = a.v[pc.x == 0 ? i : i % pc.x];
    const float y = b.v[pc.y == 0 ? i : i % pc.y];
    o.v[i] = BinaryF32(pc.op, x, y);
  }
}
