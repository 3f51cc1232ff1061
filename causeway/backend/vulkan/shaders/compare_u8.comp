#version 460
#include "common.glsl"
#define CW_T uint
#define CW_BUF U8
#include "compare.glsl"
