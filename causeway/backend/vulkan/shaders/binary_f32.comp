#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

const float kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
const float kGeluC = 0.044715;

void main() {
  F32 a = F32(pc.a), b = F32(pc.b), o = F32(pc.dst);
  CW_FOR_EACH(i) {
    // x, y: an operand repeated as a row of that many elements (0: dense).
    const float x = a.v[pc.x == 0 ? i : i % pc.x];
    const float y = b.v[pc.y == 0 ? i : i % pc.y];
    float r;
    switch (pc.op) {
      case 0: r = x + y; break;
      case 1: r = x - y; break;
      case 2: r = x * y; break;
      case 3: r = x / y; break;
      case 4: r = max(x, y); break;
      case 5: r = min(x, y); break;
      case 6: r = pow(x, y); break;
      default: {  // gelu_grad: y * gelu'(x)
        const float t = tanh(kGeluK * (x + kGeluC * x * x * x));
        r = y * (0.5 * (1.0 + t) +
                 0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * x * x));
      }
    }
    o.v[i] = r;
  }
}
