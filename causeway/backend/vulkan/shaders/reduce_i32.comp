#version 460
#include "common.glsl"
#define CW_T int
#define CW_BUF I32
#define CW_MAX_ID int(0x80000000)
#define CW_MIN_ID 0x7fffffff
#include "reduce.glsl"
