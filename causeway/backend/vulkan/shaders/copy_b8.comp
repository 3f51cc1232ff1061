#version 460
#include "common.glsl"
#define CW_BUF U8
#include "copy.glsl"
