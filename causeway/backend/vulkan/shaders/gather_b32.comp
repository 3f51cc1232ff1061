#version 460
#include "common.glsl"
#define CW_BUF U32
#include "gather.glsl"
