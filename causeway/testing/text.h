// A small, learnable text for language-model tests: sentences of a few
// words from a fixed list, seeded, so every run trains on the same text
// without needing a corpus file.
#ifndef CAUSEWAY_TESTING_TEXT_H_
#define CAUSEWAY_TESTING_TEXT_H_

#include <random>
#include <string>
#include <vector>

namespace causeway::testing {

inline std::string LearnableText(size_t chars) {
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "and",
                                          "dog", "ran", "to", "its", "home", "fast"};
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::string text;
  while (text.size() < chars) {
    const int n = 3 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) text += (i ? " " : "") + words[pick(rng)];
    text += ".\n";
  }
  return text;
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_TEXT_H_
