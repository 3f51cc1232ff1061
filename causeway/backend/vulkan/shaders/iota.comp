#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// out[i] = (i / x) % y: the index along a dimension of size y whose inner
// dimensions hold x elements.
void main() {
  CW_FOR_EACH(i) {
    const uint v = (i / pc.x) % pc.y;
    if (pc.op == 0) {
      F32(pc.dst).v[i] = float(v);
    } else {
      I32(pc.dst).v[i] = int(v);
    }
  }
}
