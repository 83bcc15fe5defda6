// Tokenizer and chat template of the engine model: deterministic stand-ins for a real BPE
// tokenizer and the Llama 3 chat template, so the emulator and the simulator count prompt
// tokens and form KV-cache blocks the way an engine would, without a vocabulary file.
//
// The tokenizer is not BPE; it only has to be deterministic, prefix-stable enough for prefix
// caching, and about as dense as a real one (~4 characters per token on English text, the usual
// rule of thumb for GPT and Llama 3 tokenizers; the test prose measures 3.9). It cuts UTF-8
// text into pieces:
//   - a word is a run of word characters: ASCII letters and digits, and every non-ASCII code
//     point (so other scripts count as words too; invalid UTF-8 bytes count as one code point
//     each and are never over-read). A word is cut into pieces of at most 5 code points; the
//     first piece carries the single space that precedes the word, when there is one, as GPT's
//     " word" pieces do (the space is not counted in the 5). Five, not four: real vocabularies
//     keep most common words whole, and with four the test prose measured only 3.5;
//   - every other non-space character (punctuation, symbols, control characters) is a piece;
//   - whitespace (space, \t, \n, \v, \f, \r) not attached to a word is cut into pieces of at
//     most 5 characters.
// A piece's token id is kFirstTextTokenId + XXH3_64(piece bytes, fixed seed) % kTextVocabSize,
// so ids are in [1000, 128000) (a 128k vocabulary, as Llama 3's) and ids below 1000 are
// reserved for special tokens. Two different pieces may share an id (a hash collision); that
// only makes two texts look alike to the cache, as rarely as a real vocabulary would not.
//
// Chat template (Llama 3 style), as token ids:
//   <|begin_of_text|>
//   for each message:  <|start_header_id|> role <|end_header_id|> "\n\n" content <|eot_id|>
//   generation prompt: <|start_header_id|> "assistant" <|end_header_id|> "\n\n"
// Special tokens are single ids below 1000 (kBeginOfText...). Role, "\n\n" and content are
// tokenized separately, so a message's tokens never merge with its neighbours'. Content given
// as parts: consecutive text parts are concatenated and tokenized as one text; a non-text part
// (image, audio, file) becomes kNonTextPartTokens placeholder tokens whose ids derive from the
// part's digest, so different images give different blocks (vLLM folds the multimodal hash
// into the block hash instead; the effect on caching is the same).
//
// Generated output: GeneratedText(seed, n) is n pronounceable lowercase words of 2 to 4
// letters separated by single spaces. Each word is exactly one token (the first without a
// leading space, the others with one), so the engine can emit GeneratedTokenId(seed, i) while
// decoding and a client that resends the reply text in the next conversation turn produces the
// same token ids, hitting the blocks the engine registered while decoding.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prefix_router::engine_model {

// Special tokens (ids below kFirstTextTokenId).
inline constexpr uint32_t kBeginOfText = 1;
inline constexpr uint32_t kStartHeaderId = 2;
inline constexpr uint32_t kEndHeaderId = 3;
inline constexpr uint32_t kEotId = 4;

inline constexpr uint32_t kFirstTextTokenId = 1000;
inline constexpr uint32_t kTextVocabSize = 127000;
// Placeholder tokens per non-text part: LLaVA-1.5's 24 x 24 patch grid of a 336-pixel image.
inline constexpr size_t kNonTextPartTokens = 576;
// Longest piece of one word or whitespace run, in code points.
inline constexpr size_t kMaxPieceCodePoints = 5;

// Appends the token ids of `text` to `out`.
void Tokenize(std::string_view text, std::vector<uint32_t>& out);
// Number of tokens Tokenize would append, without hashing.
size_t CountTokens(std::string_view text);
// The token id of one piece (as Tokenize computes it).
uint32_t PieceTokenId(std::string_view piece);
// The length of the shortest prefix of `text` that holds its first `tokens` tokens
// (text.size() when it has fewer). A cut at the end of a piece keeps every piece before it (a
// space that attaches to the next word is in that word's piece, after the cut), so Tokenize of
// the prefix is exactly the first `tokens` ids of Tokenize(text): how a replayed trace cuts a
// KV block's text to a partial block.
size_t TokenPrefixBytes(std::string_view text, size_t tokens);

// One part of a message's content, in order.
struct ChatPart {
  bool is_text = true;
  std::string text;     // when is_text
  uint64_t digest = 0;  // when !is_text: a digest of the part (e.g. of its JSON)

  static ChatPart Text(std::string text) { return ChatPart{true, std::move(text), 0}; }
  static ChatPart NonText(uint64_t digest) { return ChatPart{false, {}, digest}; }
};

struct ChatMessage {
  std::string role;
  std::string content;          // the text, for text-only messages
  std::vector<ChatPart> parts;  // when not empty, used instead of `content`
};

// The prompt tokens of a chat request, generation prompt included.
std::vector<uint32_t> RenderChat(const std::vector<ChatMessage>& messages);
// RenderChat's parts, for callers that memoise per-message tokens (the simulator): RenderChat
// is kBeginOfText, AppendChatMessage for each message, then AppendGenerationPrompt.
void AppendChatMessage(const ChatMessage& message, std::vector<uint32_t>& out);
void AppendGenerationPrompt(std::vector<uint32_t>& out);

// The seed that selects a request's generated output: a hash of its prompt token ids, so the
// same prompt gets the same reply from every engine and from the simulator.
uint64_t OutputSeed(std::span<const uint32_t> prompt);

// The prompt tokens of a completions request: <|begin_of_text|> then the prompt's tokens.
std::vector<uint32_t> RenderCompletion(std::string_view prompt);

// The i-th token of the output selected by `seed`, and its text (" word", or "word" for i = 0).
uint32_t GeneratedTokenId(uint64_t seed, size_t index);
void AppendGeneratedPiece(uint64_t seed, size_t index, std::string& out);
// The first `tokens` tokens of that output as text: Tokenize(GeneratedText(s, n)) yields
// exactly GeneratedTokenId(s, 0..n-1).
std::string GeneratedText(uint64_t seed, size_t tokens);

}  // namespace prefix_router::engine_model
