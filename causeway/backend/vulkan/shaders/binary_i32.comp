#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

void main() {
  I32 a = I32(pc.a), b = I32(pc.b), o = I32(pc.dst);
  CW_FOR_EACH(i) {
    const int x = a.v[i], y = b.v[i];
    int r;
    switch (pc.op) {
      case 0: r = x + y; break;  // GLSL integers wrap
      case 1: r = x - y; break;
      case 2: r = x * y; break;
      case 3:  // XLA's: x / 0 is -1, INT_MIN / -1 is INT_MIN
        r = y == 0 ? -1 : (y == -1 && x == int(0x80000000)) ? x : x / y;
        break;
      case 4: r = max(x, y); break;
      default: r = min(x, y);
    }
    o.v[i] = r;
  }
}
