#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// The row kernels (rows.glsl) for devices that are CPUs (lavapipe): one
// invocation per row, no shared memory and no barriers, which such a device
// runs as coroutines switched at every barrier. Dispatched with
// ceil(n / 256) workgroups (grid-stride over rows).
float Combine(float v, bool is_max) { return v; }

#define ROWS_FOR_EACH(row) CW_FOR_EACH(row)
#define COL_FIRST 0
#define COL_STRIDE 1
#include "rows.glsl"
