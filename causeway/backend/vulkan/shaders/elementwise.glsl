// The f32 element-wise ops, shared by binary_f32, unary_f32 and fused_f32
// (kernels.h: the op codes of kBinaryF32 and kUnaryF32).

const float kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
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

float BinaryF32(uint op, float x, float y) {
  switch (op) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    case 3: return x / y;
    case 4: return max(x, y);
    case 5: return min(x, y);
    case 6: return pow(x, y);
    default: {  // gelu_grad: y * gelu'(x)
      const float t = tanh(kGeluK * (x + kGeluC * x * x * x));
      return y * (0.5 * (1.0 + t) +
                  0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluC * x * x));
    }
  }
}

float UnaryF32(uint op, float x) {
  switch (op) {
    case 0: return -x;
    case 1: return exp(x);
    case 2: return abs(x);
    case 3: return log(x);
    case 4: return tanh(x);
    case 5: return 1.0 / (1.0 + exp(-x));
    case 6: return sqrt(x);
    case 7: return 1.0 / sqrt(x);
    case 8: return isnan(x) ? x : sign(x);
    case 9: return floor(x);
    case 10: return 0.5 * x * (1.0 + tanh(kGeluK * (x + kGeluC * x * x * x)));
    case 12: return sin(x);
    case 13: return cos(x);
    case 14: return atan(x);
    case 15: return Erf(x);
    default: return x;
  }
}
