// Element conversions among the IR's dtypes, on host memory: what the cpu
// kind's `convert` runs, and what literals are converted and read with.
#ifndef CAUSEWAY_IR_ELEMENTS_H_
#define CAUSEWAY_IR_ELEMENTS_H_

#include <cstdint>

#include "causeway/ir/literal.h"
#include "causeway/ir/shape.h"

namespace causeway::ir {

// IEEE binary16 and bfloat16 bit patterns to and from f32. To f32 is exact;
// from f32 rounds to nearest, ties to even (NaN stays NaN, overflow is inf).
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Converts `n` elements of `from` at `in` to `to` at `out` (which must not
// overlap `in` unless from == to). The semantics of the `convert` op:
// - to pred: "!= 0"; from pred: 0 or 1;
// - a float to an integer: truncated toward zero, saturated at the
//   integer's range, NaN -> 0;
// - an integer to a narrower integer: wraps (two's complement), as C++,
//   numpy and XLA do;
// - to f16 or bf16: through f32, rounded to nearest even.
void ConvertElements(DType from, DType to, const void* in, void* out, int64_t n);

// `literal` converted to `to`, element by element as above.
Literal ConvertLiteral(const Literal& literal, DType to);

// Element `i` of `literal` as a double (i64 beyond 2^53 is rounded; pred is
// 0 or 1). For printing and comparing, not for computing.
double ElementAsDouble(const Literal& literal, int64_t i);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_ELEMENTS_H_
