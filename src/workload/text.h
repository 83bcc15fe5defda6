// Pseudo-English text for generated workloads, sized in engine tokens.
//
// Generated prompts only have to look like prose to the tokenizer (engine_model::CountTokens,
// about 4 characters per token): words of 2 to 10 letters, sentences with commas, paragraphs.
// Words come from a fixed lexicon: about fifty common English function words plus a few
// thousand pronounceable words built from syllables (a fixed seed, the same in every process).
// The token count of every lexicon word is computed once, so a text of N tokens costs one pass
// of table lookups and appends, with no re-tokenization; the counts are exact for the way the
// tokenizer cuts words, punctuation and "\n\n" (text_test.cc checks them against CountTokens).
//
// Seeds: SubSeed derives independent, order-free streams (document i of workload seed s), so a
// shared text is the same whether it is generated first or last, eagerly or lazily.
//
// Thread-safety: pure functions over a lexicon built once (thread-safe static initialization).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/rng.h"

namespace prefix_router::workload {

// A seed for stream `stream` (a constant per kind of text) and item `index`, from `seed`.
uint64_t SubSeed(uint64_t seed, uint64_t stream, uint64_t index);

// Appends about `tokens` tokens of prose (sentences; a paragraph break every 3 to 7 sentences)
// to `out` and returns how many it appended (>= tokens, at most 3 more; 0 when tokens is 0).
// When `out` is not empty and does not end in whitespace, the first word is preceded by a
// space. The last sentence ends with `end` ('.' or '?').
size_t AppendProse(Rng& rng, size_t tokens, std::string& out, char end = '.');

// Appends exactly `tokens` tokens of prose ending in `end` (REQUIRES: tokens >= 1), for texts
// that must fill a fixed number of tokens (a replayed trace's KV blocks): AppendProse up to a
// few tokens short, then a closing sentence of one-token words that uses up the rest. The same
// leading-space rule as AppendProse.
void AppendExactProse(Rng& rng, size_t tokens, std::string& out, char end = '.');

// `header` followed by prose, about `tokens` tokens in all (the header counts; at least one
// word of prose follows it).
std::string HeadedText(Rng& rng, std::string header, size_t tokens, char end = '.');

// Appends `words` capitalized lexicon words separated by spaces (a title); returns the tokens.
size_t AppendTitle(Rng& rng, size_t words, std::string& out);

}  // namespace prefix_router::workload
