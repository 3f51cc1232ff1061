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

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Table {
  uint64_t v[];
};

// The push constants as recorded (kernels.h, Push). Without a table, a to
// params are addresses (0 when the kernel has fewer operands). With one (a
// command buffer recorded once per executable and reused, its addresses
// changing between launches), each is a byte offset into the buffer whose
// address is table[slot], its slot 16 bits of `slots` (0xffff: none).
layout(push_constant) uniform Push {
  uint64_t table;
  uint64_t a;
  uint64_t b;
  uint64_t c;
  uint64_t d;
  uint64_t dst;     // the result (Push::out)
  uint64_t params;  // int32 parameter block
  uint n;           // work items
  uint op;          // selector within the kernel
  uint x;           // kernel-specific scalars
  uint y;
  uint slots_ab;    // a's slot in the low 16 bits, b's in the high
  uint slots_cd;
  uint slots_dp;    // dst's, then params'
} cw_push;

// What every kernel reads: the operands' addresses, resolved once per
// invocation before the kernel's own main (renamed cw_main below) runs.
struct Args {
  uint64_t a, b, c, d, dst, params;
  uint n, op, x, y;
};
Args pc;

uint64_t CwResolve(uint slot, uint64_t at) {
  if (cw_push.table == 0ul) return at;
  if (slot == 0xffffu) return 0ul;
  return Table(cw_push.table).v[slot] + at;
}

void cw_main();

void main() {
  pc.a = CwResolve(cw_push.slots_ab & 0xffffu, cw_push.a);
  pc.b = CwResolve(cw_push.slots_ab >> 16, cw_push.b);
  pc.c = CwResolve(cw_push.slots_cd & 0xffffu, cw_push.c);
  pc.d = CwResolve(cw_push.slots_cd >> 16, cw_push.d);
  pc.dst = CwResolve(cw_push.slots_dp & 0xffffu, cw_push.dst);
  pc.params = CwResolve(cw_push.slots_dp >> 16, cw_push.params);
  pc.n = cw_push.n;
  pc.op = cw_push.op;
  pc.x = cw_push.x;
  pc.y = cw_push.y;
  cw_main();
}
#define main cw_main

// First item of this invocation and the stride of the grid-stride loop
// (one-dimensional dispatches with local_size_x = CW_LOCAL).
#define CW_LOCAL 256
#define CW_FOR_EACH(i)                                                        \
  for (uint i = gl_GlobalInvocationID.x; i < pc.n;                            \
       i += gl_NumWorkGroups.x * CW_LOCAL)
