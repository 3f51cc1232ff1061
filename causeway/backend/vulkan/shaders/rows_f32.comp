#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// Row kernels over n rows of x (= cols) elements (rows.glsl). One
// workgroup per row (striding over rows when there are more rows than
// workgroups); its invocations stride over the columns and meet in shared
// memory for each sum or maximum.

shared float partial[CW_LOCAL];

// The sum (or maximum) of every invocation's `v`, returned to all of them.
float Combine(float v, bool is_max) {
  const uint t = gl_LocalInvocationID.x;
  partial[t] = v;
  barrier();
  for (uint s = CW_LOCAL / 2; s > 0; s >>= 1) {
    if (t < s) {
      partial[t] = is_max ? max(partial[t], partial[t + s]) : partial[t] + partial[t + s];
    }
    barrier();
  }
  const float r = partial[0];
  barrier();  // partial is reused by the next Combine
  return r;
}

#define ROWS_FOR_EACH(row) \
  for (uint row = gl_WorkGroupID.x; row < pc.n; row += gl_NumWorkGroups.x)
#define COL_FIRST int(gl_LocalInvocationID.x)
#define COL_STRIDE CW_LOCAL
#include "rows.glsl"
