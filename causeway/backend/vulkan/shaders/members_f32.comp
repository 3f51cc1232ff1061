#version 460
#include "common.glsl"
#define CW_T float
#define CW_BUF F32
#include "members.glsl"
