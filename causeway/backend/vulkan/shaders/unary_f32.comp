#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

const float kGeluK = 0.7978845608028654;
const float kGeluC = 0.044715;

// erf: its Maclaurin series below 0.5 (relative error under 1e-7 there,
// where an absolute bound would not do), Abramowitz and Stegun 7.1.26
// above (absolute error under 1.5e-7, relative under 3e-7).
float Erf(float x) {
  const float ax = abs(x);
  if (ax < 0.5) {
    const float z = x * x;
    return 1.1283791670955126 * x *
           (1.0 + z * (-1.0 / 3.0 + z * (0.1 + z * (-1.0 / 42.0 + z * (1.0 / 216.0 - z / 1320.0)))));
  }
  const float t = 1.0 / (1.0 + 0.3275911 * ax);
  const float poly =
      t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - poly * exp(-x * x));
}

void main() {
  F32 a = F32(pc.a), o = F32(pc.dst);
  CW_FOR_EACH(i) {
    const float x = a.v[i];
    float r;
    switch (pc.op) {
      case 0: r = -x; break;
      case 1: r = exp(x); break;
      case 2: r = abs(x); break;
      case 3: r = log(x); break;
      case 4: r = tanh(x); break;
      case 5: r = 1.0 / (1.0 + exp(-x)); break;
      case 6: r = sqrt(x); break;
      case 7: r = 1.0 / sqrt(x); break;
      case 8: r = isnan(x) ? x : sign(x); break;
      case 9: r = floor(x); break;
      case 10: r = 0.5 * x * (1.0 + tanh(kGeluK * (x + kGeluC * x * x * x))); break;
      case 12: r = sin(x); break;
      case 13: r = cos(x); break;
      case 14: r = atan(x); break;
      case 15: r = Erf(x); break;
      default: r = x;
    }
    o.v[i] = r;
  }
}
