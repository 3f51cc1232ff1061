// The convolution kernels (ir::OpKind::kConvolution and its two gradients)
// as im2col and one single-threaded sgemm per batch element and group:
//   y_g [O/G, P]   = w_g [O/G, R] x col [R, P]        (kConvolution)
//   col [R, P]     = w_g^T x y_g, added back to x     (kConvInputGrad)
//   w_g [O/G, R]  += y_g x col^T, over the batch      (kConvKernelGrad)
// where col holds, for each of the R = C/G * K kernel taps, the input
// element each of the P output positions reads (0 in the padding). col
// covers a chunk of whole output lines at a time, so that its buffer stays
// within kChunkFloats (a large image would otherwise need R x P floats that
// no device memory accounts for). A 1x1 window of stride 1 and no padding
// reads the input as it lies, with no copy. Spatial ranks 1 and 2 run as
// rank 3 with unit dims in front.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "causeway/backend/cpu/kernels.h"
#include "causeway/base/check.h"

extern "C" {
#include <cblas.h>
}

namespace causeway::backend::cpu::kernels {
namespace {

// Most floats of a col chunk (unless one output line of every tap is more).
constexpr int64_t kChunkFloats = int64_t{1} << 21;

struct Geometry {
  int64_t n = 0, c = 0, o = 0, groups = 1;
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t taps() const { return k[0] * k[1] * k[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t rows() const { return cg() * taps(); }
  // The input as it lies is the col matrix.
  bool direct() const {
    for (int i = 0; i < 3; ++i) {
      if (k[i] != 1 || stride[i] != 1 || pad[i] != 0 || out[i] != in[i]) return false;
    }
    return true;
  }
};

// `window`: the kernel's spatial dims (a convolution's w.dims past the
// first two, a pooling's inst.dims).
Geometry Make(const ir::Instruction& inst, const ir::Shape& x, const int64_t* window,
              const ir::Shape& y) {
  Geometry g;
  g.n = x.dims[0];
  g.c = x.dims[1];
  const size_t spatial = x.dims.size() - 2;
  const size_t skip = 3 - spatial;
  for (size_t i = 0; i < spatial; ++i) {
    g.in[skip + i] = x.dims[i + 2];
    g.k[skip + i] = window[i];
    g.out[skip + i] = y.dims[i + 2];
    g.stride[skip + i] = inst.window_strides[i];
    g.dilation[skip + i] = inst.window_dilations[i];
    g.pad[skip + i] = inst.pad_low[i];
  }
  return g;
}

// Output positions [lo, hi) along a dim whose input index p * stride + off
// lies in [0, size).
void ValidRange(int64_t off, int64_t stride, int64_t size, int64_t out, int64_t& lo,
                int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = size - off <= 0 ? 0 : (size - off + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
}

// The output lines (of out[2] positions; (p0, p1) flattened) a col chunk
// covers: [first, first + count).
struct Lines {
  int64_t first = 0, count = 0;
  int64_t positions(const Geometry& g) const { return count * g.out[2]; }
};

// Visits every (col row, input line, output line) pairing of one group's
// input for the output lines `lines`: `line(src, dst, lo, hi)` for the
// positions p2 in [lo, hi) of the chunk's output line at dst, which read
// input element src + p2 * stride2; positions outside [lo, hi) and whole
// lines outside the input read padding (`pad(dst, count)`).
template <typename Line, typename Pad>
void ForEachTap(const Geometry& g, Lines lines, Line line, Pad pad) {
  const int64_t p_size = lines.positions(g);
  for (int64_t c = 0; c < g.cg(); ++c) {
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          const int64_t r = ((c * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2;
          const int64_t off2 = k2 * g.dilation[2] - g.pad[2];
          int64_t lo = 0, hi = 0;
          ValidRange(off2, g.stride[2], g.in[2], g.out[2], lo, hi);
          for (int64_t l = lines.first; l < lines.first + lines.count; ++l) {
            const int64_t p0 = l / g.out[1], p1 = l % g.out[1];
            const int64_t i0 = p0 * g.stride[0] + k0 * g.dilation[0] - g.pad[0];
            {
              const int64_t i1 = p1 * g.stride[1] + k1 * g.dilation[1] - g.pad[1];
              const int64_t dst = r * p_size + (l - lines.first) * g.out[2];
              if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || lo == hi) {
                pad(dst, g.out[2]);
                continue;
              }
              const int64_t src = (c * g.in[0] + i0) * g.in[1] * g.in[2] + i1 * g.in[2];
              pad(dst, lo);
              line(src + off2, dst, lo, hi);
              pad(dst + hi, g.out[2] - hi);
            }
          }
        }
      }
    }
  }
}

// col [rows, the chunk's positions] from one group's input x_g [C/G, S].
void Im2Col(const Geometry& g, Lines lines, const float* x, float* col) {
  const int64_t s = g.stride[2];
  ForEachTap(
      g, lines,
      [&](int64_t src, int64_t dst, int64_t lo, int64_t hi) {
        if (s == 1) {
          std::memcpy(col + dst + lo, x + src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
        } else {
          for (int64_t p = lo; p < hi; ++p) col[dst + p] = x[src + p * s];
        }
      },
      [&](int64_t dst, int64_t count) {
        if (count > 0) std::memset(col + dst, 0, static_cast<size_t>(count) * sizeof(float));
      });
}

// Adds col [rows, the chunk's positions] back into one group's input
// gradient dx_g [C/G, S].
void Col2ImAdd(const Geometry& g, Lines lines, const float* col, float* dx) {
  const int64_t s = g.stride[2];
  ForEachTap(
      g, lines,
      [&](int64_t src, int64_t dst, int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) dx[src + p * s] += col[dst + p];
      },
      [](int64_t, int64_t) {});
}

// Scratch for col, kept by each device thread between calls.
float* Scratch(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

blasint B(int64_t v) { return static_cast<blasint>(v); }

// The chunks of output lines that a col buffer of kChunkFloats covers; one
// chunk of every line where the input is read as it lies.
std::vector<Lines> Chunks(const Geometry& g, bool direct) {
  const int64_t lines = g.out[0] * g.out[1];
  const int64_t per =
      direct ? lines : std::max<int64_t>(1, kChunkFloats / std::max<int64_t>(1, g.rows() * g.out[2]));
  std::vector<Lines> out;
  for (int64_t l = 0; l < lines; l += per) out.push_back(Lines{l, std::min(per, lines - l)});
  return out;
}

}  // namespace

void Convolution(const ir::Instruction& inst, const ir::Shape& x_shape,
                 const ir::Shape& w_shape, const ir::Shape& y_shape, const float* first,
                 const float* second, float* out) {
  Geometry g = Make(inst, x_shape, w_shape.dims.data() + 2, y_shape);
  g.o = w_shape.dims[0];
  g.groups = inst.feature_groups;
  const int64_t rows = g.rows(), p = g.out_size(), s = g.in_size(), og = g.og();
  const bool direct = g.direct();
  const std::vector<Lines> chunks = Chunks(g, direct);
  float* col = direct ? nullptr : Scratch(rows * chunks.front().positions(g));
  // Chunk c's col matrix of one group's input xg, and its leading dimension.
  const auto col_of = [&](const float* xg, const Lines& c) -> std::pair<const float*, int64_t> {
    if (direct) return {xg, p};
    Im2Col(g, c, xg, col);
    return {col, c.positions(g)};
  };
  switch (inst.op) {
    case ir::OpKind::kConvolution: {
      const float* x = first;
      const float* w = second;
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const float* xg = x + (n * g.c + grp * g.cg()) * s;
          float* yg = out + (n * g.o + grp * og) * p;
          for (const Lines& c : chunks) {
            const auto [src, ld] = col_of(xg, c);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B(og), B(c.positions(g)),
                        B(rows), 1.0f, w + grp * og * rows, B(rows), src, B(ld), 0.0f,
                        yg + c.first * g.out[2], B(p));
          }
        }
      }
      return;
    }
    case ir::OpKind::kConvInputGrad: {
      const float* y = first;
      const float* w = second;
      std::memset(out, 0, static_cast<size_t>(g.n * g.c * s) * sizeof(float));
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          float* dxg = out + (n * g.c + grp * g.cg()) * s;
          const float* yg = y + (n * g.o + grp * og) * p;
          for (const Lines& c : chunks) {
            const int64_t cp = c.positions(g);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, B(rows), B(cp), B(og), 1.0f,
                        w + grp * og * rows, B(rows), yg + c.first * g.out[2], B(p), 0.0f,
                        direct ? dxg : col, B(direct ? p : cp));
            if (!direct) Col2ImAdd(g, c, col, dxg);
          }
        }
      }
      return;
    }
    case ir::OpKind::kConvKernelGrad: {
      const float* x = first;
      const float* y = second;
      std::memset(out, 0, static_cast<size_t>(g.o * rows) * sizeof(float));
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const float* xg = x + (n * g.c + grp * g.cg()) * s;
          const float* yg = y + (n * g.o + grp * og) * p;
          for (const Lines& c : chunks) {
            const auto [src, ld] = col_of(xg, c);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B(og), B(rows),
                        B(c.positions(g)), 1.0f, yg + c.first * g.out[2], B(p), src, B(ld),
                        1.0f, out + grp * og * rows, B(rows));
          }
        }
      }
      return;
    }
    default:
      CW_CHECK(false) << "not a convolution: " << ir::OpName(inst.op);
  }
}

void Pool(const ir::Instruction& inst, const ir::Shape& x_shape, const ir::Shape& y_shape,
          const float* x, float* y) {
  // As a convolution of one channel per group with a kernel of the window.
  Geometry g = Make(inst, x_shape, inst.dims.data(), y_shape);
  g.o = g.groups = g.c;
  const bool max = inst.reduce_kind == ir::ReduceKind::kMax;
  const float identity = max ? -std::numeric_limits<float>::infinity() : 0.0f;
  const int64_t s = g.in_size(), p = g.out_size(), s2 = g.stride[2];
  // Each output line takes each window tap's input line in turn, over the
  // positions whose input lies inside it (the padding is the identity).
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    const float* xp = x + plane * s;
    float* yp = y + plane * p;
    std::fill(yp, yp + p, identity);
    for (int64_t p0 = 0; p0 < g.out[0]; ++p0) {
      for (int64_t p1 = 0; p1 < g.out[1]; ++p1) {
        float* row = yp + (p0 * g.out[1] + p1) * g.out[2];
        for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
          const int64_t i0 = p0 * g.stride[0] + k0 * g.dilation[0] - g.pad[0];
          if (i0 < 0 || i0 >= g.in[0]) continue;
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
            const int64_t i1 = p1 * g.stride[1] + k1 * g.dilation[1] - g.pad[1];
            if (i1 < 0 || i1 >= g.in[1]) continue;
            const float* line = xp + (i0 * g.in[1] + i1) * g.in[2];
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              const int64_t off = k2 * g.dilation[2] - g.pad[2];
              int64_t lo = 0, hi = 0;
              ValidRange(off, s2, g.in[2], g.out[2], lo, hi);
              if (max) {
                for (int64_t q = lo; q < hi; ++q) row[q] = std::max(row[q], line[q * s2 + off]);
              } else {
                for (int64_t q = lo; q < hi; ++q) row[q] += line[q * s2 + off];
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace causeway::backend::cpu::kernels
