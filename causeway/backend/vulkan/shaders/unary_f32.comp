#version 460
#include "common.glsl"
#include "elementwise.glsl"
layout(local_size_x = CW_LOCAL) in;

void main() {
  F32 a = F32(pc.a), o = F32(pc.dst);
  CW_FOR_EACH(i) o.v[i] = UnaryF32(pc.op, a.v[i]);
}
