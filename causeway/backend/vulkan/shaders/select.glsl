// Included by select_*.comp after `#define CW_BUF` (the element buffer type).
layout(local_size_x = CW_LOCAL) in;

void main() {
  U8 p = U8(pc.a);
  CW_BUF t = CW_BUF(pc.b), f = CW_BUF(pc.c), o = CW_BUF(pc.dst);
  CW_FOR_EACH(i) { o.v[i] = p.v[i] != uint8_t(0) ? t.v[i] : f.v[i]; }
}
