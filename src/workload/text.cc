#include "workload/text.h"

#include <array>
#include <set>
#include <vector>

#include "core/rng.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::workload {
namespace {

// Common English words (2 to 7 letters), drawn 40% of the time as in real prose, where the
// hundred most frequent words make up about half of all running words.
constexpr std::array<std::string_view, 56> kFunctionWords = {
    "the",   "of",    "and",  "to",    "in",    "is",    "that",  "for",    "it",   "as",    "with", "was",
    "on",    "be",    "by",   "at",    "this",  "are",   "from",  "or",     "an",   "which", "but",  "not",
    "have",  "has",   "were", "their", "its",   "can",   "all",   "one",    "been", "more",  "also", "when",
    "there", "other", "into", "these", "such",  "than",  "only",  "most",   "over", "some",  "each", "may",
    "would", "under", "both", "after", "where", "while", "about", "between"};

constexpr std::array<std::string_view, 38> kOnsets = {
    "b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",  "m",  "n",  "p",  "r",  "s",  "t",  "v",  "w",  "z",  "br",
    "cr", "dr", "fr", "gr", "pr", "tr", "bl", "cl", "fl", "gl", "pl", "sl", "st", "sp", "sc", "sh", "ch", "th", "qu"};
constexpr std::array<std::string_view, 12> kNuclei = {"a", "e", "i", "o", "u", "a", "e", "ai", "ea", "ou", "io", "ee"};
constexpr std::array<std::string_view, 16> kCodas = {"",  "",  "",   "",   "n",  "r",  "s",  "t",
                                                     "l", "m", "nd", "st", "ng", "rk", "nt", "ck"};

constexpr size_t kContentWords = 4096;
constexpr size_t kMinLetters = 2;
constexpr size_t kMaxLetters = 10;

struct Word {
  std::string lower;
  std::string capital;
  uint32_t tokens = 0;  // the same with or without a leading space, capitalized or not
};

struct Lexicon {
  std::vector<Word> function_words;
  std::vector<Word> content_words;
  std::vector<Word> one_token_words;  // of both lists: what AppendExactProse ends with
};

Word MakeWord(std::string_view w) {
  Word word;
  word.lower = std::string(w);
  word.capital = word.lower;
  word.capital[0] = static_cast<char>(word.capital[0] - 'a' + 'A');
  word.tokens = static_cast<uint32_t>(engine_model::CountTokens(word.lower));
  return word;
}

Lexicon BuildLexicon() {
  Lexicon lex;
  for (std::string_view w : kFunctionWords) lex.function_words.push_back(MakeWord(w));
  Rng rng(0x6c657869636f6e31ULL);  // "lexicon1": fixed, so every process has the same words
  std::set<std::string> seen(kFunctionWords.begin(), kFunctionWords.end());
  while (lex.content_words.size() < kContentWords) {
    // 1 to 4 syllables, mostly 2: content words of 2 to 10 letters, 6 on average.
    static constexpr std::array<int, 8> kSyllables = {1, 1, 2, 2, 2, 3, 3, 4};
    const int syllables = kSyllables[rng.Uniform(kSyllables.size())];
    std::string w;
    for (int i = 0; i < syllables; ++i) {
      w += kOnsets[rng.Uniform(kOnsets.size())];
      w += kNuclei[rng.Uniform(kNuclei.size())];
      if (i + 1 == syllables || rng.Uniform(3) == 0) w += kCodas[rng.Uniform(kCodas.size())];
    }
    if (w.size() < kMinLetters || w.size() > kMaxLetters) continue;
    if (!seen.insert(w).second) continue;
    lex.content_words.push_back(MakeWord(w));
  }
  for (const auto* list : {&lex.function_words, &lex.content_words}) {
    for (const Word& w : *list) {
      if (w.tokens == 1) lex.one_token_words.push_back(w);
    }
  }
  return lex;
}

const Lexicon& GetLexicon() {
  static const Lexicon lex = BuildLexicon();
  return lex;
}

const Word& DrawWord(Rng& rng, const Lexicon& lex) {
  if (rng.Uniform(10) < 4) return lex.function_words[rng.Uniform(lex.function_words.size())];
  return lex.content_words[rng.Uniform(lex.content_words.size())];
}

bool EndsInSpace(const std::string& s) {
  if (s.empty()) return true;
  const char c = s.back();
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

uint64_t SubSeed(uint64_t seed, uint64_t stream, uint64_t index) { return Mix64(Mix64(seed ^ Mix64(stream)) + index); }

size_t AppendProse(Rng& rng, size_t tokens, std::string& out, char end) {
  if (tokens == 0) return 0;
  const Lexicon& lex = GetLexicon();
  size_t count = 0;
  // Each word is about 5.5 bytes with its space and 1.3 tokens.
  out.reserve(out.size() + tokens * 5);
  bool need_space = !EndsInSpace(out);
  size_t sentences_left_in_paragraph = 3 + rng.Uniform(5);
  while (count < tokens) {
    // One sentence of 5 to 18 words, cut short when the budget runs out.
    const size_t words = 5 + rng.Uniform(14);
    for (size_t i = 0; i < words; ++i) {
      const Word& w = DrawWord(rng, lex);
      if (need_space) out += ' ';
      out += i == 0 ? w.capital : w.lower;
      count += w.tokens;
      need_space = true;
      // The closing punctuation costs one token: stop one short of the budget.
      if (count + 1 >= tokens) break;
      if (i + 1 < words && i > 0 && rng.Uniform(6) == 0) {
        out += ',';
        ++count;
      }
    }
    const bool last = count + 1 >= tokens;
    out += last ? end : (rng.Uniform(16) == 0 ? '?' : '.');
    ++count;
    if (last) break;
    if (--sentences_left_in_paragraph == 0) {
      // "\n\n" before an unspaced word is one whitespace token.
      out += "\n\n";
      ++count;
      need_space = false;
      sentences_left_in_paragraph = 3 + rng.Uniform(5);
    }
  }
  return count;
}

void AppendExactProse(Rng& rng, size_t tokens, std::string& out, char end) {
  const Lexicon& lex = GetLexicon();
  size_t left = tokens;
  // AppendProse overshoots its budget by up to 3 tokens: asking for 5 fewer leaves 2 to 5.
  if (left > 6) left -= AppendProse(rng, left - 5, out);
  // A closing sentence of left - 1 one-token words and its full stop.
  bool need_space = !EndsInSpace(out);
  for (size_t i = 0; i + 1 < left; ++i) {
    const Word& w = lex.one_token_words[rng.Uniform(lex.one_token_words.size())];
    if (need_space) out += ' ';
    out += i == 0 ? w.capital : w.lower;
    need_space = true;
  }
  out += end;
}

std::string HeadedText(Rng& rng, std::string header, size_t tokens, char end) {
  const size_t used = engine_model::CountTokens(header);
  AppendProse(rng, tokens > used ? tokens - used : 1, header, end);
  return header;
}

size_t AppendTitle(Rng& rng, size_t words, std::string& out) {
  const Lexicon& lex = GetLexicon();
  size_t count = 0;
  bool need_space = !EndsInSpace(out);
  for (size_t i = 0; i < words; ++i) {
    const Word& w = lex.content_words[rng.Uniform(lex.content_words.size())];
    if (need_space) out += ' ';
    out += w.capital;
    count += w.tokens;
    need_space = true;
  }
  return count;
}

}  // namespace prefix_router::workload
