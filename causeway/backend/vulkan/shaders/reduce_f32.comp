#version 460
#include "common.glsl"
#define CW_T float
#define CW_BUF F32
#define CW_MAX_ID uintBitsToFloat(0xff800000u)
#define CW_MIN_ID uintBitsToFloat(0x7f800000u)
#include "reduce.glsl"
