#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// Dtype codes (DTypeCode in executable.cc): 0 f32, 1 i32, 2 pred, 3 f16,
// 4 bf16, 5 i64, 6 i8, 7 u8. Two-byte elements are read and written a byte
// at a time and i64 as two words, so no 16-bit storage is needed and no two
// invocations write one word.

float Bf16ToF32(uint bits) { return uintBitsToFloat(bits << 16); }

uint F32ToBf16(float f) {
  const uint u = floatBitsToUint(f);
  if (isnan(f)) return (u >> 16) | 0x40u;  // stays a (quiet) NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
}

uint Load16(uint64_t base, uint i) {
  return uint(U8(base).v[2 * i]) | (uint(U8(base).v[2 * i + 1]) << 8);
}

void Store16(uint64_t base, uint i, uint bits) {
  U8(base).v[2 * i] = uint8_t(bits & 0xffu);
  U8(base).v[2 * i + 1] = uint8_t(bits >> 8);
}

// A float truncated toward zero, saturated at [lo, hi], NaN -> 0.
int64_t Saturate(float f, float lo, float hi_excl, int64_t min_v, int64_t max_v) {
  if (isnan(f)) return 0;
  if (f <= lo) return min_v;
  if (f >= hi_excl) return max_v;
  return int64_t(f);
}

void main() {
  CW_FOR_EACH(i) {
    // Read as a float (f32, f16, bf16) or a 64-bit integer (the rest; pred
    // as 0 or 1).
    float f = 0.0;
    int64_t n = 0;
    const bool from_float = pc.x == 0 || pc.x == 3 || pc.x == 4;
    switch (pc.x) {
      case 0: f = F32(pc.a).v[i]; break;
      case 1: n = I32(pc.a).v[i]; break;
      case 2: n = U8(pc.a).v[i] != uint8_t(0) ? 1 : 0; break;
      case 3: f = unpackHalf2x16(Load16(pc.a, i)).x; break;
      case 4: f = Bf16ToF32(Load16(pc.a, i)); break;
      case 5:
        n = int64_t(uint64_t(U32(pc.a).v[2 * i]) | (uint64_t(U32(pc.a).v[2 * i + 1]) << 32));
        break;
      case 6: n = int(int8_t(U8(pc.a).v[i])); break;
      default: n = int(U8(pc.a).v[i]); break;
    }
    switch (pc.y) {
      case 0: F32(pc.dst).v[i] = from_float ? f : float(n); break;
      case 1: {
        // Truncate toward zero, saturate, NaN -> 0; integers wrap.
        I32(pc.dst).v[i] = from_float ? int(Saturate(f, -2147483648.0, 2147483648.0,
                                                     -2147483648l, 2147483647l))
                                      : int(n);
        break;
      }
      case 2: {
        const bool nz = from_float ? f != 0.0 : n != 0;
        U8(pc.dst).v[i] = uint8_t(nz ? 1 : 0);
        break;
      }
      case 3: Store16(pc.dst, i, packHalf2x16(vec2(from_float ? f : float(n), 0.0)) & 0xffffu); break;
      case 4: Store16(pc.dst, i, F32ToBf16(from_float ? f : float(n))); break;
      case 5: {
        const int64_t r = from_float ? Saturate(f, -9223372036854775808.0, 9223372036854775808.0,
                                                int64_t(0x8000000000000000ul),
                                                int64_t(0x7ffffffffffffffful))
                                     : n;
        U32(pc.dst).v[2 * i] = uint(uint64_t(r) & 0xffffffffu);
        U32(pc.dst).v[2 * i + 1] = uint(uint64_t(r) >> 32);
        break;
      }
      case 6: {
        const int64_t r = from_float ? Saturate(f, -128.0, 128.0, -128l, 127l) : n;
        U8(pc.dst).v[i] = uint8_t(uint(r) & 0xffu);
        break;
      }
      default: {
        const int64_t r = from_float ? Saturate(f, 0.0, 256.0, 0l, 255l) : n;
        U8(pc.dst).v[i] = uint8_t(uint(r) & 0xffu);
        break;
      }
    }
  }
}
