#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// Dtype codes: 0 f32, 1 i32, 2 pred.
void main() {
  CW_FOR_EACH(i) {
    // Read as f32 or i32 (pred as i32 0/1).
    float f = 0.0;
    int n = 0;
    bool from_f32 = pc.x == 0;
    if (pc.x == 0) {
      f = F32(pc.a).v[i];
    } else if (pc.x == 1) {
      n = I32(pc.a).v[i];
    } else {
      n = U8(pc.a).v[i] != uint8_t(0) ? 1 : 0;
    }
    if (pc.y == 0) {
      F32(pc.dst).v[i] = from_f32 ? f : float(n);
    } else if (pc.y == 1) {
      int r = n;
      if (from_f32) {
        // Truncate toward zero, saturate, NaN -> 0.
        r = isnan(f) ? 0 : f <= -2147483648.0 ? int(0x80000000)
                       : f >= 2147483648.0 ? 0x7fffffff : int(f);
      }
      I32(pc.dst).v[i] = r;
    } else {
      const bool nz = from_f32 ? f != 0.0 : n != 0;
      U8(pc.dst).v[i] = uint8_t(nz ? 1 : 0);
    }
  }
}
