#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// The cpu kind's counter-based generator (kernels_data.cc), bit for bit:
// SplitMix64 of the seed's key and the counter; 24 random bits per uniform;
// a normal from the cosine branch of Box-Muller on counters 2i and 2i+1.
uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ul;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ul;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBul;
  return z ^ (z >> 31);
}

float UniformAt(uint64_t key, uint64_t counter) {
  return float(uint(SplitMix64(key ^ counter) >> 40)) * (1.0 / 16777216.0);
}

void main() {
  const int seed = I32(pc.a).v[0];
  const uint64_t key = SplitMix64(uint64_t(uint(seed)) ^ 0xD1B54A32D192ED03ul);
  F32 o = F32(pc.dst);
  CW_FOR_EACH(i) {
    if (pc.op == 0) {
      o.v[i] = UniformAt(key, uint64_t(i));
    } else {
      const uint64_t c = uint64_t(i) * 2;
      const float u1 = 1.0 - UniformAt(key, c);  // (0, 1]
      const float u2 = UniformAt(key, c + 1);
      o.v[i] = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
  }
}
