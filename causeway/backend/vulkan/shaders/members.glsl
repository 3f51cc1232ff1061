// A reduction across the members of a collective on one GPU (kernels.h,
// kMembers*): included by members_*.comp after `#define CW_T` (the type)
// and `CW_BUF` (the buffer type). `params` is an array of 64-bit addresses: the x members'
// operands in rank order, then the y results. Every result gets
//   r[i] = in_0[i] OP in_1[i] OP ... OP in_{x-1}[i]
// combined in rank order, as the host-staged hub does, so both give the
// same bits. op 0 sum, 1 max. One pass: each invocation reads item i of
// every member and writes it to every result.
layout(local_size_x = CW_LOCAL) in;

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Addresses {
  uint64_t v[];
};

void main() {
  Addresses at = Addresses(pc.params);
  CW_FOR_EACH(i) {
    CW_T acc = CW_BUF(at.v[0]).v[i];
    for (uint r = 1; r < pc.x; ++r) {
      const CW_T v = CW_BUF(at.v[r]).v[i];
      acc = pc.op == 0 ? acc + v : max(acc, v);
    }
    for (uint o = 0; o < pc.y; ++o) CW_BUF(at.v[pc.x + o]).v[i] = acc;
  }
}
