// Included by compare_*.comp after `#define CW_T` (element type) and
// `#define CW_BUF` (its buffer reference type).
layout(local_size_x = CW_LOCAL) in;

void main() {
  CW_BUF a = CW_BUF(pc.a), b = CW_BUF(pc.b);
  U8 o = U8(pc.dst);
  CW_FOR_EACH(i) {
    const CW_T x = a.v[i], y = b.v[i];
    bool r;
    switch (pc.op) {
      case 0: r = x == y; break;
      case 1: r = x != y; break;
      case 2: r = x < y; break;
      case 3: r = x <= y; break;
      case 4: r = x > y; break;
      default: r = x >= y;
    }
    o.v[i] = uint8_t(r ? 1 : 0);
  }
}
