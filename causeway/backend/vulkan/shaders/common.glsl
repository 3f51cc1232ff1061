// Shared by every compute shader of the vulkan kind (causeway/backend/vulkan/
// kernels.h is the contract on the host side; keep the two in step).
//
// Operands are reached through buffer device addresses in the push
// constants: no descriptor sets. `params` points at the step's int32
// parameter block (kernel-specific layout, documented in kernels.h).
// Work is a grid-stride loop over `n` items, so a dispatch of any size of
// grid covers every item.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8 { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Params { int v[]; };

layout(push_constant) uniform Push {
  uint64_t a;       // operand addresses; 0 when the kernel has fewer
  uint64_t b;
  uint64_t c;
  uint64_t d;
  uint64_t dst;     // result address (Push::out)
  uint64_t params;  // int32 parameter block; 0 when the kernel takes none
  uint n;           // work items
  uint op;          // selector within the kernel
  uint x;           // kernel-specific scalars
  uint y;
} pc;

// First item of this invocation and the stride of the grid-stride loop
// (one-dimensional dispatches with local_size_x = CW_LOCAL).
#define CW_LOCAL 256
#define CW_FOR_EACH(i)                                                        \
  for (uint i = gl_GlobalInvocationID.x; i < pc.n;                            \
       i += gl_NumWorkGroups.x * CW_LOCAL)
