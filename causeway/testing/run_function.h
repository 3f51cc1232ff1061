// Runs an IR function once on the calling thread, for tests of the IR and
// its users (autodiff, composites) that only care about the numbers.
#ifndef CAUSEWAY_TESTING_RUN_FUNCTION_H_
#define CAUSEWAY_TESTING_RUN_FUNCTION_H_

#include <vector>

#include "causeway/backend/cpu/executable.h"
#include "causeway/base/check.h"
#include "causeway/ir/function.h"
#include "causeway/ir/literal.h"

namespace causeway::testing {

// Compiles and runs `f` on `inputs`; returns its results. CHECK-fails on any
// error: for functions the test expects to be valid.
inline std::vector<ir::Literal> RunFunction(const ir::Function& f,
                                            const std::vector<ir::Literal>& inputs) {
  auto exe = backend::cpu::Compile(f);
  CW_CHECK_OK(exe.status());
  std::vector<const void*> in;
  for (const ir::Literal& l : inputs) in.push_back(l.data());
  std::vector<ir::Literal> out;
  for (int i = 0; i < f.num_outputs(); ++i) out.emplace_back(f.output_shape(i));
  std::vector<void*> out_ptrs;
  for (ir::Literal& l : out) out_ptrs.push_back(l.data());
  CW_CHECK_OK((*exe)->Run(in, out_ptrs, {}));
  return out;
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_RUN_FUNCTION_H_
