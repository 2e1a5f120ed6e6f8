// Byte-level BPE tokenizer (GPT-2 family: GPT-2, SmolLM/StarCoder, Llama 3, Qwen2) read from a Hugging Face
// `tokenizer.json`:
//   model:          {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a", "b"], ...]}
//   added_tokens:   [{"id", "content", "special"}]: matched verbatim in the input before pre-tokenization
//   pre_tokenizer:  ByteLevel (GPT-2 regex), Sequence[Digits(individual_digits), ByteLevel] (SmolLM), or a
//                   Split whose pattern is Llama 3's (\p{N}{1,3}) or Qwen2's (\p{N}); anything else is an error
//   post_processor: a TemplateProcessing that starts with a special token means "prepend BOS".
//   model.ignore_merges (Llama 3): a pre-token found whole in the vocabulary is emitted without merging.
// Encoding: added tokens split the text; each other piece is pre-tokenized, its UTF-8 bytes mapped to GPT-2's
// printable byte alphabet, and merged by rank (lowest rank first, leftmost first). Decoding maps back.
//
// Also SentencePiece-style BPE (Llama 2, Mistral, TinyLlama), recognised by model.byte_fallback or a '▁'
// normalizer / Metaspace pre-tokenizer: spaces become '▁' (U+2581), '▁' is prepended (normalizer Prepend: to
// every text segment between added tokens; Metaspace prepend_scheme "first"/"always"/"never"), Metaspace
// split=true cuts before every '▁', symbols start as characters, a character missing from the vocabulary
// becomes its UTF-8 bytes as <0xXX> tokens (byte_fallback) or the unk token, then merges by rank. Decoding
// maps '▁' back to ' ', <0xXX> to its byte, and drops the one leading space.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace nvfp4::model {

enum class PreTokenizer : uint8_t {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  SmolLM,  // every \p{N} its own piece, then Gpt2
  Llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2,   // Llama3 with \p{N} (one digit per piece)
};
const char* pretokenizer_name(PreTokenizer p);

// Splits text (UTF-8) into pre-tokens (byte ranges [begin, end) of `text`). Exposed for tests.
std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer p, const std::string& text);

// Unicode classes used by the pre-tokenizers (generated tables, see tools/gen_model_unicode.py).
bool is_letter(uint32_t cp);      // general category L*
bool is_number(uint32_t cp);      // general category N*
bool is_whitespace(uint32_t cp);  // White_Space property

// GPT-2's byte alphabet: byte b -> code point (printable bytes map to themselves, the rest to 256+).
uint32_t byte_to_codepoint(uint8_t b);

class Tokenizer {
 public:
  // Parses tokenizer.json text. `path` is used in messages. Throws nvfp4::Error.
  static Tokenizer from_json(const std::string& json_text, const std::string& path);
  static Tokenizer from_file(const std::string& path);

  // Token ids of `text`. Added/special tokens written in the text are recognised when parse_special is
  // true (chat templates rely on it); BOS is not added here (see add_bos()).
  std::vector<int32_t> encode(const std::string& text, bool parse_special = true) const;
  // Bytes of the tokens (special tokens included as their text unless skip_special).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  std::string token_bytes(int32_t id) const;  // one token's bytes ("" for an unknown id)

  int32_t token_id(const std::string& token) const;  // -1 when absent (vocab or added token content)
  bool is_special(int32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  PreTokenizer pretokenizer() const { return pre_; }
  bool sentencepiece() const { return spm_; }
  bool add_bos() const { return add_bos_; }
  int32_t bos_id() const { return bos_id_; }

 private:
  void bpe(const std::string& piece, std::vector<int32_t>* out) const;
  void merge(std::vector<int32_t>& sym) const;
  void encode_segment(const std::string& s, bool first, std::vector<int32_t>* out) const;

  PreTokenizer pre_ = PreTokenizer::Gpt2;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;                // Llama 3: a pre-token that is itself in the vocabulary is one token
  bool spm_ = false;                          // SentencePiece-style BPE (see above)
  enum class Prepend : uint8_t { Every, First, Always, Never } spm_prepend_ = Prepend::Every;
  bool spm_split_ = false;
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  int32_t fallback_ids_[256];                 // id of "<0xXX>" for each byte (-1 when absent)
  bool add_bos_ = false;
  int32_t bos_id_ = -1;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;      // byte-level form ("Ġthe"); added tokens: their content
  std::vector<uint8_t> special_;              // per id: 1 for special added tokens
  std::vector<uint8_t> added_;                // per id: 1 for added tokens (decoded verbatim)
  std::vector<std::string> added_contents_;   // sorted longest first (for matching)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
  int32_t byte_ids_[256];                     // id of each single-byte token
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Chat templates the runner applies itself (no Jinja): ChatML (SmolLM2, Qwen2):
//   [<|im_start|>system\n{system}<|im_end|>\n]<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n
// Llama 3 (<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>...), and Llama 2 / Mistral
// ([INST] [<<SYS>>\n{system}\n<</SYS>>\n\n]{prompt} [/INST], BOS added by the tokenizer). Chosen from the
// template text found in tokenizer_config.json / the GGUF; None when it is none of these.
enum class ChatFormat : uint8_t { None, ChatML, Llama3, Llama2 };
ChatFormat detect_chat_format(const std::string& jinja_template);
// `system` may be empty (the ChatML default of the SmolLM2 template is used when default_system is given).
std::string apply_chat_template(ChatFormat f, const std::string& prompt, const std::string& system);
// Default system message a template inserts when none is given ("" when none), e.g. SmolLM2's.
std::string default_system_message(const std::string& jinja_template);

}  // namespace nvfp4::model
