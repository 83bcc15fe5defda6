#include "engine_model/tokenizer.h"

#include <algorithm>

#include "core/prefix_key.h"  // xxhash.h, with XXH_STATIC_LINKING_ONLY handled
#include "core/rng.h"

namespace prefix_router::engine_model {
namespace {

// Fixed seeds: changing them changes every token id, and with them every block hash.
constexpr uint64_t kTokenSeed = 0x746f6b656e763031ULL;    // "tokenv01"
constexpr uint64_t kNonTextSeed = 0x696d616765763031ULL;  // "imagev01"

inline bool IsSpace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

inline bool IsWordByte(unsigned char c) {
  return c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

// Byte length of the code point starting at s[i]: 1 for ASCII, for a stray continuation byte,
// and for a lead byte whose continuation bytes are missing or malformed.
inline size_t CodePointBytes(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = 1;
  if (c >= 0xF0 && c <= 0xF7) {
    len = 4;
  } else if (c >= 0xE0) {
    len = c <= 0xEF ? 3 : 1;
  } else if (c >= 0xC0) {
    len = 2;
  }
  if (len == 1 || i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

// Emits the pieces of the word starting at `start` (after `lead` bytes of attached space);
// returns the index just past the word.
template <typename Emit>
size_t EmitWord(std::string_view s, size_t start, size_t lead, Emit& emit) {
  size_t p = start + lead;
  while (true) {
    size_t code_points = 0;
    while (p < s.size() && code_points < kMaxPieceCodePoints && IsWordByte(static_cast<unsigned char>(s[p]))) {
      p += CodePointBytes(s, p);
      ++code_points;
    }
    emit(s.substr(start, p - start));
    if (p >= s.size() || !IsWordByte(static_cast<unsigned char>(s[p]))) return p;
    start = p;
  }
}

// Calls emit(piece) for every piece of `s`, in order (see the header for the rules).
template <typename Emit>
void ForEachPiece(std::string_view s, Emit&& emit) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (IsSpace(c)) {
      size_t j = i;
      while (j < n && IsSpace(static_cast<unsigned char>(s[j]))) ++j;
      // A single space directly before a word belongs to the word.
      const bool attach = j < n && IsWordByte(static_cast<unsigned char>(s[j])) && s[j - 1] == ' ';
      const size_t end = attach ? j - 1 : j;
      for (size_t k = i; k < end; k += kMaxPieceCodePoints) {
        emit(s.substr(k, std::min(kMaxPieceCodePoints, end - k)));
      }
      i = attach ? EmitWord(s, end, 1, emit) : j;
    } else if (IsWordByte(c)) {
      i = EmitWord(s, i, 0, emit);
    } else {
      emit(s.substr(i, 1));
      ++i;
    }
  }
}

void AppendNonTextPart(uint64_t digest, std::vector<uint32_t>& out) {
  const uint64_t base = Mix64(digest ^ kNonTextSeed);
  for (size_t i = 0; i < kNonTextPartTokens; ++i) {
    out.push_back(kFirstTextTokenId + static_cast<uint32_t>(Mix64(base + i) % kTextVocabSize));
  }
}

void AppendContent(const ChatMessage& m, std::vector<uint32_t>& out, std::string& scratch) {
  if (m.parts.empty()) {
    Tokenize(m.content, out);
    return;
  }
  scratch.clear();
  for (const ChatPart& part : m.parts) {
    if (part.is_text) {
      scratch += part.text;
      continue;
    }
    Tokenize(scratch, out);
    scratch.clear();
    AppendNonTextPart(part.digest, out);
  }
  Tokenize(scratch, out);
}

void AppendHeader(std::string_view role, std::vector<uint32_t>& out) {
  out.push_back(kStartHeaderId);
  Tokenize(role, out);
  out.push_back(kEndHeaderId);
  Tokenize("\n\n", out);
}

constexpr std::string_view kConsonants = "bcdfghklmnprstvz";
constexpr std::string_view kVowels = "aeiou";
constexpr size_t kMaxGeneratedPieceBytes = 5;  // " " + 4 letters

// Writes the index-th generated piece into buf; returns its length.
size_t GeneratedPiece(uint64_t seed, size_t index, char* buf) {
  uint64_t h = Mix64(Mix64(seed) + index);
  size_t n = 0;
  if (index > 0) buf[n++] = ' ';
  const size_t letters = 2 + h % 3;
  h /= 3;
  // Alternate consonants and vowels so the words are pronounceable.
  bool vowel = (h & 1) != 0;
  h >>= 1;
  for (size_t i = 0; i < letters; ++i) {
    const std::string_view set = vowel ? kVowels : kConsonants;
    buf[n++] = set[h % set.size()];
    h /= set.size();
    vowel = !vowel;
  }
  return n;
}

}  // namespace

uint32_t PieceTokenId(std::string_view piece) {
  return kFirstTextTokenId +
         static_cast<uint32_t>(XXH3_64bits_withSeed(piece.data(), piece.size(), kTokenSeed) % kTextVocabSize);
}

void Tokenize(std::string_view text, std::vector<uint32_t>& out) {
  ForEachPiece(text, [&out](std::string_view piece) { out.push_back(PieceTokenId(piece)); });
}

size_t CountTokens(std::string_view text) {
  size_t count = 0;
  ForEachPiece(text, [&count](std::string_view) { ++count; });
  return count;
}

size_t TokenPrefixBytes(std::string_view text, size_t tokens) {
  if (tokens == 0) return 0;
  size_t count = 0;
  size_t end = text.size();
  // ForEachPiece has no early exit; the pieces after the cut are only counted.
  ForEachPiece(text, [&](std::string_view piece) {
    if (++count == tokens) end = static_cast<size_t>(piece.data() + piece.size() - text.data());
  });
  return end;
}

void AppendChatMessage(const ChatMessage& message, std::vector<uint32_t>& out) {
  std::string scratch;
  AppendHeader(message.role, out);
  AppendContent(message, out, scratch);
  out.push_back(kEotId);
}

void AppendGenerationPrompt(std::vector<uint32_t>& out) { AppendHeader("assistant", out); }

std::vector<uint32_t> RenderChat(const std::vector<ChatMessage>& messages) {
  std::vector<uint32_t> out;
  std::string scratch;
  out.push_back(kBeginOfText);
  for (const ChatMessage& m : messages) {
    AppendHeader(m.role, out);
    AppendContent(m, out, scratch);
    out.push_back(kEotId);
  }
  AppendGenerationPrompt(out);
  return out;
}

uint64_t OutputSeed(std::span<const uint32_t> prompt) { return XXH3_64bits(prompt.data(), prompt.size_bytes()); }

std::vector<uint32_t> RenderCompletion(std::string_view prompt) {
  std::vector<uint32_t> out;
  out.push_back(kBeginOfText);
  Tokenize(prompt, out);
  return out;
}

void AppendGeneratedPiece(uint64_t seed, size_t index, std::string& out) {
  char buf[kMaxGeneratedPieceBytes];
  out.append(buf, GeneratedPiece(seed, index, buf));
}

uint32_t GeneratedTokenId(uint64_t seed, size_t index) {
  char buf[kMaxGeneratedPieceBytes];
  return PieceTokenId(std::string_view(buf, GeneratedPiece(seed, index, buf)));
}

std::string GeneratedText(uint64_t seed, size_t tokens) {
  std::string out;
  out.reserve(tokens * kMaxGeneratedPieceBytes);
  for (size_t i = 0; i < tokens; ++i) AppendGeneratedPiece(seed, i, out);
  return out;
}

}  // namespace prefix_router::engine_model
