#version 460
#include "common.glsl"
#define CW_T int
#define CW_BUF I32
#include "members.glsl"
