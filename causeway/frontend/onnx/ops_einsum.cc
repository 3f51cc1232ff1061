// Einsum as IR ops: each operand's repeated letters become a diagonal (a
// mask of the identity and a sum), letters no other operand and not the
// output names are summed away, operands are then contracted pairwise, left
// to right, by dot_general (letters shared and still needed are batch
// dimensions, letters shared and no longer needed are contracted), and the
// result is transposed into the output's order. An ellipsis stands for the
// same leading letters in every operand, aligned to the right as numpy
// broadcasts them.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "causeway/base/status_macros.h"
#include "causeway/frontend/onnx/converter.h"

namespace causeway::onnx_import {
namespace {

using Node = ::onnx::NodeProto;
using ir::Value;

// An operand: its value and one letter per dimension.
struct Term {
  Value v;
  std::string letters;
};

// Letters standing for an ellipsis's dims (not a-z or A-Z, so never the
// equation's own).
char EllipsisLetter(int64_t i) { return static_cast<char>('0' + i); }

// `spec` (one operand's or the output's letters, with at most one "...")
// with its ellipsis spelled as the last `count` of `width` ellipsis letters.
absl::StatusOr<std::string> Expand(const std::string& spec, int64_t count, int64_t width) {
  const size_t at = spec.find("...");
  if (at == std::string::npos) return spec;
  if (spec.find("...", at + 3) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", spec, "' has two ellipses"));
  }
  std::string e;
  for (int64_t i = width - count; i < width; ++i) e.push_back(EllipsisLetter(i));
  return spec.substr(0, at) + e + spec.substr(at + 3);
}

// The diagonal over a letter `t.letters` repeats: x masked by the identity
// on the two dims, summed over the second.
absl::Status TakeDiagonals(Converter& c, Term& t) {
  while (true) {
    size_t p = 0, q = std::string::npos;
    for (; p < t.letters.size() && q == std::string::npos; ++p) {
      q = t.letters.find(t.letters[p], p + 1);
    }
    if (q == std::string::npos) return absl::OkStatus();
    --p;
    const ir::Shape s = c.ShapeOf(t.v);
    if (s.dims[p] != s.dims[q]) {
      return absl::InvalidArgumentError(absl::StrCat("letter '", std::string(1, t.letters[p]),
                                                     "' has sizes ", s.dims[p], " and ", s.dims[q]));
    }
    const ir::Shape idx(ir::DType::kI32, s.dims);
    const Value eye = c.b.Compare(c.b.Iota(idx, static_cast<int64_t>(p)),
                                  c.b.Iota(idx, static_cast<int64_t>(q)), ir::Comparison::kEq);
    const Value masked = c.b.Select(eye, t.v, c.Full(0, s.dtype, s.dims));
    t.v = c.b.ReduceSum(masked, {static_cast<int64_t>(q)});
    t.letters.erase(q, 1);
  }
}

// Sums `t` over its letters that `keep` lacks.
void SumAway(Converter& c, Term& t, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string kept;
  for (size_t i = 0; i < t.letters.size(); ++i) {
    if (keep.find(t.letters[i]) == std::string::npos) {
      axes.push_back(static_cast<int64_t>(i));
    } else {
      kept.push_back(t.letters[i]);
    }
  }
  if (axes.empty()) return;
  t.v = c.b.ReduceSum(t.v, axes);
  t.letters = kept;
}

// Sizes of every letter over `terms`, a size of 1 broadcasting to another.
absl::StatusOr<std::map<char, int64_t>> Sizes(Converter& c, const std::vector<Term>& terms) {
  std::map<char, int64_t> size;
  for (const Term& t : terms) {
    const std::vector<int64_t> d = c.ShapeOf(t.v).dims;
    for (size_t i = 0; i < t.letters.size(); ++i) {
      int64_t& s = size.try_emplace(t.letters[i], d[i]).first->second;
      if (s == 1) s = d[i];
      if (d[i] != s && d[i] != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "letter '", std::string(1, t.letters[i]), "' has sizes ", s, " and ", d[i]));
      }
    }
  }
  return size;
}

// `t` with its size-1 dims broadcast to the letters' sizes.
Value Broadcast(Converter& c, const Term& t, const std::map<char, int64_t>& size) {
  std::vector<int64_t> want;
  for (char l : t.letters) want.push_back(size.at(l));
  if (want == c.ShapeOf(t.v).dims) return t.v;
  std::vector<int64_t> map(want.size());
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int64_t>(i);
  return c.b.Broadcast(t.v, want, map);
}

// a and b contracted into one term whose letters are the ones `keep`
// names: shared letters kept are batch dims, shared letters not kept are
// contracted.
Term Contract(Converter& c, Term a, Term b, const std::string& keep,
              const std::map<char, int64_t>& size) {
  a.v = Broadcast(c, a, size);
  b.v = Broadcast(c, b, size);
  std::vector<int64_t> ab, bb, ac, bc;
  std::string batch, a_free, b_free;
  for (size_t i = 0; i < a.letters.size(); ++i) {
    const char l = a.letters[i];
    const size_t j = b.letters.find(l);
    if (j == std::string::npos) {
      a_free.push_back(l);
    } else if (keep.find(l) != std::string::npos) {
      ab.push_back(static_cast<int64_t>(i));
      bb.push_back(static_cast<int64_t>(j));
      batch.push_back(l);
    } else {
      ac.push_back(static_cast<int64_t>(i));
      bc.push_back(static_cast<int64_t>(j));
    }
  }
  for (char l : b.letters) {
    if (a.letters.find(l) == std::string::npos) b_free.push_back(l);
  }
  return Term{c.b.DotGeneral(a.v, b.v, ab, bb, ac, bc), batch + a_free + b_free};
}

absl::Status Einsum(Converter& c, const Node& n) {
  std::string eq = c.AttrString(n, "equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> specs = absl::StrSplit(lhs, ',');
  if (static_cast<int>(specs.size()) != n.input_size()) {
    return absl::InvalidArgumentError(absl::StrCat("equation '", eq, "' has ", specs.size(),
                                                   " operands; the node has ", n.input_size()));
  }
  std::vector<Term> terms;
  int64_t width = 0;  // dims the ellipsis stands for, at most
  std::vector<int64_t> counts;
  for (size_t i = 0; i < specs.size(); ++i) {
    CW_ASSIGN_OR_RETURN(Value v, c.In(n, static_cast<int>(i)));
    const int64_t rank = c.ShapeOf(v).rank();
    const bool ellipsis = specs[i].find("...") != std::string::npos;
    const auto letters = static_cast<int64_t>(specs[i].size()) - (ellipsis ? 3 : 0);
    for (char l : specs[i]) {
      if (l != '.' && !std::isalpha(static_cast<unsigned char>(l))) {
        return absl::InvalidArgumentError(absl::StrCat("equation '", eq, "': '", std::string(1, l), "'"));
      }
    }
    if (ellipsis ? letters > rank : letters != rank) {
      return absl::InvalidArgumentError(absl::StrCat("'", specs[i], "' does not fit operand ", i,
                                                     " of rank ", rank));
    }
    counts.push_back(ellipsis ? rank - letters : 0);
    width = std::max(width, counts.back());
    terms.push_back(Term{v, ""});
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    CW_ASSIGN_OR_RETURN(terms[i].letters, Expand(specs[i], counts[i], width));
  }
  std::string out;
  if (arrow != std::string::npos) {
    CW_ASSIGN_OR_RETURN(out, Expand(eq.substr(arrow + 2), width, width));
  } else {
    // Implicit: the ellipsis, then the letters used once, sorted.
    std::map<char, int> uses;
    for (const Term& t : terms) {
      for (char l : t.letters) ++uses[l];
    }
    for (int64_t i = 0; i < width; ++i) out.push_back(EllipsisLetter(i));
    for (const auto& [l, count] : uses) {
      if (count == 1 && std::isalpha(static_cast<unsigned char>(l))) out.push_back(l);
    }
  }
  for (char l : out) {
    if (std::count(out.begin(), out.end(), l) > 1) {
      return absl::InvalidArgumentError(absl::StrCat("the output repeats '", std::string(1, l), "'"));
    }
  }
  CW_ASSIGN_OR_RETURN(const auto size, Sizes(c, terms));
  for (char l : out) {
    if (!size.contains(l)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the output's '", std::string(1, l), "' is no operand's"));
    }
  }
  // Letters needed after operand i: the output's and the later operands'.
  for (size_t i = 0; i < terms.size(); ++i) {
    CW_RETURN_IF_ERROR(TakeDiagonals(c, terms[i]));
  }
  const auto needed_after = [&](size_t i) {
    std::string keep = out;
    for (size_t j = i + 1; j < terms.size(); ++j) keep += terms[j].letters;
    return keep;
  };
  // Sum away what only one operand has and nothing needs.
  for (size_t i = 0; i < terms.size(); ++i) {
    std::string keep = out;
    for (size_t j = 0; j < terms.size(); ++j) {
      if (j != i) keep += terms[j].letters;
    }
    SumAway(c, terms[i], keep);
  }
  Term acc = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    acc = Contract(c, acc, terms[i], needed_after(i), size);
    SumAway(c, acc, needed_after(i));
  }
  acc.v = Broadcast(c, acc, size);
  std::vector<int64_t> perm;
  for (char l : out) perm.push_back(static_cast<int64_t>(acc.letters.find(l)));
  const Value result = acc.letters == out ? acc.v : c.b.Transpose(acc.v, perm);
  c.Set(n, 0, result, c.TypeOf(n, 0));
  return absl::OkStatus();
}

}  // namespace

void AddEinsumOps(OpTable& t) { t["Einsum"] = Einsum; }

}  // namespace causeway::onnx_import
