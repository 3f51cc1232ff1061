#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

void main() {
  I32 a = I32(pc.a), o = I32(pc.dst);
  CW_FOR_EACH(i) {
    const int x = a.v[i];
    int r;
    switch (pc.op) {
      case 0: r = -x; break;             // wraps
      case 2: r = x < 0 ? -x : x; break;  // abs(INT_MIN) is INT_MIN
      case 8: r = int(x > 0) - int(x < 0); break;
      default: r = x;
    }
    o.v[i] = r;
  }
}
