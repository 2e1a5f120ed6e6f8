// Byte-level BPE tokenizer: pre-tokenizer splits, merge order, added tokens, decoding, chat templates.
// Expected splits and ids were computed independently with Hugging Face `tokenizers` 0.23.3 (the pre-tokenizers
// ByteLevel, Digits+ByteLevel, and Split with Llama 3's / Qwen2's regex) or by hand where stated.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/tokenizer.h"

using namespace nvfp4::model;

namespace {

std::vector<std::string> pieces(PreTokenizer p, const std::string& s) {
  std::vector<std::string> out;
  for (auto [a, b] : pretokenize(p, s)) out.push_back(s.substr(a, b - a));
  return out;
}

using V = std::vector<std::string>;

const std::string kCases[] = {"Hello world", "I'm here, aren't WE'LL?", "  two  spaces\n\nnew\r\nline ", "12345 x1y22",
                              "(paren) -> a.b", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E!!"};

}  // namespace

TEST(Pretokenize, Gpt2MatchesHuggingFace) {
  const V want[] = {{"Hello", " world"},
                    {"I", "'m", " here", ",", " aren", "'t", " WE", "'", "LL", "?"},
                    {" ", " two", " ", " spaces", "\n", "\n", "new", "\r", "\n", "line", " "},
                    {"12345", " x", "1", "y", "22"},
                    {"(", "paren", ")", " ->", " a", ".", "b"},
                    {"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "!!"}};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pieces(PreTokenizer::Gpt2, kCases[i]), want[i]) << kCases[i];
}

TEST(Pretokenize, SmolLMSplitsEveryDigit) {
  EXPECT_EQ(pieces(PreTokenizer::SmolLM, kCases[3]), (V{"1", "2", "3", "4", "5", " x", "1", "y", "2", "2"}));
  EXPECT_EQ(pieces(PreTokenizer::SmolLM, kCases[2]),
            (V{" ", " two", " ", " spaces", "\n", "\n", "new", "\r", "\n", "line", " "}));
}

TEST(Pretokenize, Llama3AndQwen2MatchHuggingFace) {
  const V want[] = {{"Hello", " world"},
                    {"I", "'m", " here", ",", " aren", "'t", " WE", "'LL", "?"},
                    {" ", " two", " ", " spaces", "\n\n", "new", "\r\n", "line", " "},
                    {"123", "45", " x", "1", "y", "22"},
                    {"(paren", ")", " ->", " a", ".b"},
                    {"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "!!"}};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pieces(PreTokenizer::Llama3, kCases[i]), want[i]) << kCases[i];
  EXPECT_EQ(pieces(PreTokenizer::Qwen2, kCases[3]), (V{"1", "2", "3", "4", "5", " x", "1", "y", "2", "2"}));
  EXPECT_EQ(pieces(PreTokenizer::Qwen2, kCases[4]), want[4]);
}

TEST(Pretokenize, PiecesCoverTheTextExactly) {
  const std::string s = "a\xFF\xC3 b\n\n\n  7\xE2\x82\xAC x";  // includes invalid UTF-8 bytes
  for (auto p : {PreTokenizer::Gpt2, PreTokenizer::SmolLM, PreTokenizer::Llama3, PreTokenizer::Qwen2}) {
    std::string joined;
    size_t last = 0;
    for (auto [a, b] : pretokenize(p, s)) {
      EXPECT_EQ(a, last);
      EXPECT_LT(a, b);
      joined += s.substr(a, b - a);
      last = b;
    }
    EXPECT_EQ(joined, s) << pretokenizer_name(p);
  }
}

TEST(UnicodeClasses, Spots) {
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0xE9));     // é
  EXPECT_TRUE(is_letter(0x65E5));   // 日
  EXPECT_FALSE(is_letter('1'));
  EXPECT_TRUE(is_number('7'));
  EXPECT_TRUE(is_number(0xBD));     // ½ (No)
  EXPECT_TRUE(is_number(0x2162));   // Ⅲ (Nl)
  EXPECT_FALSE(is_number('x'));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_TRUE(is_whitespace('\n'));
  EXPECT_FALSE(is_whitespace(0x200B));  // zero width space is not White_Space
}

TEST(ByteAlphabet, Gpt2Mapping) {
  EXPECT_EQ(byte_to_codepoint('!'), 0x21u);
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_codepoint(0), 0x100u);
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);  // the last non-printable byte
}

namespace {

// A tiny vocabulary with hand-assigned ids. Merges (rank order): "a b", "ab c", "Ġ a".
//   "abc ab a" -> pieces "abc", " ab", " a"
//   "abc":  a b c -> (a,b) rank 0 -> ab c -> (ab,c) rank 1 -> abc                          = [7]
//   " ab":  Ġ a b -> candidates (Ġ,a) rank 2 and (a,b) rank 0: lowest rank first -> Ġ ab   = [3, 5]
//   " a":   Ġ a -> Ġa                                                                      = [6]
std::string tiny_json() {
  std::string vocab = "\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"!\": 4, \"ab\": 5, \"\\u0120a\": 6, \"abc\": 7";
  return std::string("{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 8, \"content\": \"<|end|>\", \"special\": true}],") +
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}," +
         "\"model\": {\"type\": \"BPE\", \"vocab\": {" + vocab + "}, \"merges\": [\"a b\", [\"ab\", \"c\"], \"\\u0120 a\"]}}";
}

}  // namespace

TEST(Tokenizer, MergesByRankHandComputed) {
  const Tokenizer t = Tokenizer::from_json(tiny_json(), "tiny.json");
  EXPECT_EQ(t.encode("abc ab a"), (std::vector<int32_t>{7, 3, 5, 6}));
  EXPECT_EQ(t.encode("a!<|end|>c"), (std::vector<int32_t>{0, 4, 8, 2}));
  // Without added-token parsing the text is plain bytes, and '<' has no token in this vocabulary.
  EXPECT_THROW(t.encode("a!<|end|>c", false), nvfp4::Error);
}

TEST(Tokenizer, DecodeRoundTripAndSpecials) {
  const Tokenizer t = Tokenizer::from_json(tiny_json(), "tiny.json");
  EXPECT_EQ(t.decode({7, 3, 5, 6}), "abc ab a");
  EXPECT_EQ(t.decode({0, 8, 2}), "a<|end|>c");
  EXPECT_EQ(t.decode({0, 8, 2}, true), "ac");
  EXPECT_TRUE(t.is_special(8));
  EXPECT_FALSE(t.is_special(7));
  EXPECT_EQ(t.token_id("<|end|>"), 8);
  EXPECT_EQ(t.token_id("zz"), -1);
}

TEST(Tokenizer, RejectsWhatItCannotDo) {
  EXPECT_THROW(Tokenizer::from_json("{", "x.json"), nvfp4::Error);
  EXPECT_THROW(Tokenizer::from_json("{\"model\": {\"type\": \"Unigram\"}}", "x.json"), nvfp4::Error);
  // A merge naming a token absent from the vocabulary.
  EXPECT_THROW(Tokenizer::from_json("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
                                    "\"vocab\": {\"a\": 0}, \"merges\": [\"a q\"]}}", "x.json"),
               nvfp4::Error);
  // A pre-tokenizer that is neither byte-level nor SentencePiece-style.
  EXPECT_THROW(Tokenizer::from_json("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", "
                                    "\"vocab\": {\"a\": 0}, \"merges\": []}}", "x.json"),
               nvfp4::Error);
}

TEST(ChatTemplate, ChatMLAsSmolLM2) {
  const std::string tmpl =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}...";
  EXPECT_EQ(detect_chat_format(tmpl), ChatFormat::ChatML);
  const std::string sys = default_system_message(tmpl);
  EXPECT_EQ(sys, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(apply_chat_template(ChatFormat::ChatML, "Hi", sys),
            "<|im_start|>system\n" + sys + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(detect_chat_format("{{ bos_token }}<|start_header_id|>"), ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_format("{{ '[INST] ' + content }}"), ChatFormat::Llama2);
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, "Hi", ""), "[INST] Hi [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, "Hi", "Be brief."), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
  EXPECT_EQ(detect_chat_format("{{ messages }}"), ChatFormat::None);
}

// The real SmolLM2 vocabulary, when scripts/demo.sh (or import-gguf) has produced it under models/.
TEST(Tokenizer, SmolLM2KnownIds) {
  const std::string path = std::string(NVFP4_TEST_DATA_DIR) + "/../../models/smollm2-135m-bf16/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (run scripts/demo.sh first)";
  const Tokenizer t = Tokenizer::from_file(path);
  EXPECT_EQ(t.pretokenizer(), PreTokenizer::SmolLM);
  EXPECT_EQ(t.encode("Hello world!"), (std::vector<int32_t>{19556, 905, 17}));
  EXPECT_EQ(t.encode("The capital of France is Paris."), (std::vector<int32_t>{504, 3575, 282, 4649, 314, 7042, 30}));
  EXPECT_EQ(t.encode("Numbers 2024 and 3.14"),
            (std::vector<int32_t>{39006, 216, 34, 32, 34, 36, 284, 216, 35, 30, 33, 36}));
  EXPECT_EQ(t.encode("don't stop"), (std::vector<int32_t>{12420, 982, 2853}));
  EXPECT_EQ(t.encode("<|im_start|>user\nHi<|im_end|>\n"), (std::vector<int32_t>{1, 4093, 198, 26843, 2, 198}));
  EXPECT_EQ(t.encode("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC"), (std::vector<int32_t>{83, 1939, 2756, 17097, 241, 115, 40993}));
  EXPECT_EQ(t.decode(t.encode("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC")), "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC");
}

// ignore_merges (Llama 3): "abab" is in the vocabulary, so it is one token although no merge chain builds it
// (the only merge is "a b" -> [ab, ab] otherwise). Hand-computed.
TEST(Tokenizer, IgnoreMergesTakesWholeVocabularyWords) {
  const std::string vocab = "\"a\": 0, \"b\": 1, \"ab\": 2, \"abab\": 3";
  auto json = [&](bool ignore) {
    return std::string("{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},") +
           "\"model\": {\"type\": \"BPE\", \"ignore_merges\": " + (ignore ? "true" : "false") + ", \"vocab\": {" + vocab +
           "}, \"merges\": [\"a b\"]}}";
  };
  EXPECT_EQ(Tokenizer::from_json(json(false), "t").encode("abab"), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(Tokenizer::from_json(json(true), "t").encode("abab"), (std::vector<int32_t>{3}));
}

// SentencePiece-style BPE (Llama 2): hand-computed. Vocabulary <unk> <s> </s> ▁ a b ▁a ab ▁ab <0xE6> <0x97> <0xA5>,
// merges (rank order) "a b", "▁ a", "▁ ab"; normalizer Prepend('▁') + Replace(' ' -> '▁'); byte fallback.
//   "ab a日" -> "▁ab▁a日" -> ▁ a b ▁ a <0xE6><0x97><0xA5>   (日 is not in the vocabulary: its 3 UTF-8 bytes)
//   (a,b) rank 0 -> ▁ ab ▁ a ...; (▁,a) rank 1 -> ▁ ab ▁a ...; (▁,ab) rank 2 -> ▁ab ▁a ...   = [8, 6, 9, 10, 11]
TEST(Tokenizer, SentencePieceBpeHandComputed) {
  const std::string m = "\xE2\x96\x81";
  const std::string json =
      "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, \"content\": \"<s>\", "
      "\"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
      "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"" + m +
      "\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"" + m + "\"}]},"
      "\"pre_tokenizer\": null,"
      "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
      "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}]},"
      "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, "
      "\"<s>\": 1, \"</s>\": 2, \"" + m + "\": 3, \"a\": 4, \"b\": 5, \"" + m + "a\": 6, \"ab\": 7, \"" + m +
      "ab\": 8, \"<0xE6>\": 9, \"<0x97>\": 10, \"<0xA5>\": 11}, \"merges\": [\"a b\", \"" + m + " a\", \"" + m +
      " ab\"]}}";
  const Tokenizer t = Tokenizer::from_json(json, "spm.json");
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.bos_id(), 1);
  const std::string text = "ab a\xE6\x97\xA5";
  EXPECT_EQ(t.encode(text), (std::vector<int32_t>{8, 6, 9, 10, 11}));
  EXPECT_EQ(t.decode({8, 6, 9, 10, 11}), text);
  // Each text segment between added tokens gets its own '▁' (the Prepend normalizer runs per segment).
  EXPECT_EQ(t.encode("<s>ab</s>a"), (std::vector<int32_t>{1, 8, 2, 6}));
  // 'c' has neither a token nor a <0x63> byte token: unk.
  EXPECT_EQ(t.encode("c"), (std::vector<int32_t>{3, 0}));
}

// Metaspace(prepend_scheme "first", split true), newer Llama 2 files: only the text's first segment gets '▁',
// and pieces start at each '▁'. Same vocabulary and merges as above; hand-computed:
//   "ab a</s>ab" -> segment "ab a" -> "▁ab▁a" -> pieces "▁ab" [8], "▁a" [6]; </s> [2]; "ab" (no '▁') -> [7]
TEST(Tokenizer, SentencePieceMetaspaceFirstAndSplit) {
  const std::string m = "\xE2\x96\x81";
  const std::string json =
      "{\"added_tokens\": [{\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
      "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"" + m + "\", \"prepend_scheme\": \"first\", "
      "\"split\": true},"
      "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"" + m +
      "\": 3, \"a\": 4, \"b\": 5, \"" + m + "a\": 6, \"ab\": 7, \"" + m + "ab\": 8}, \"merges\": [\"a b\", \"" + m +
      " a\", \"" + m + " ab\"]}}";
  const Tokenizer t = Tokenizer::from_json(json, "spm2.json");
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("ab a</s>ab"), (std::vector<int32_t>{8, 6, 2, 7}));
  EXPECT_EQ(t.decode({8, 6, 2, 7}), "ab a</s>ab");
}
