#include "model/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"

namespace nvfp4::model {

namespace {
#include "model/unicode_tables.inc"

template <size_t N>
bool in_ranges(const uint32_t (&r)[N][2], uint32_t cp) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

// One decoded code point and its byte range in the text. Invalid UTF-8 bytes decode as themselves (one byte).
struct Cp {
  uint32_t cp;
  size_t begin, end;
};

std::vector<Cp> decode_utf8(const std::string& s, size_t b, size_t e) {
  std::vector<Cp> out;
  size_t i = b;
  while (i < e) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    int len = 1;
    uint32_t cp = c;
    if (c >= 0xC0 && c < 0xE0) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c < 0xF0) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c < 0xF8) { len = 4; cp = c & 0x07; }
    bool ok = len == 1 ? c < 0x80 : i + len <= e;
    for (int k = 1; ok && k < len; ++k) {
      const uint8_t cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) { len = 1; cp = c; }
    out.push_back({cp, i, i + len});
    i += len;
  }
  return out;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) s += static_cast<char>(cp);
  else if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_other(uint32_t cp) { return !is_whitespace(cp) && !is_letter(cp) && !is_number(cp); }
bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at i, 0 when none.
size_t contraction(const std::vector<Cp>& c, size_t i, bool ci) {
  if (c[i].cp != '\'' || i + 1 >= c.size()) return 0;
  auto at = [&](size_t k) { return k < c.size() ? (ci ? lower_ascii(c[k].cp) : c[k].cp) : 0u; };
  const uint32_t a = at(i + 1), b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  return 0;
}

// Whitespace run handling shared by both regex families: \s+(?!\S) then \s+.
size_t whitespace_run(const std::vector<Cp>& c, size_t i) {
  size_t e = i;
  while (e < c.size() && is_whitespace(c[e].cp)) ++e;
  const size_t run = e - i;
  if (e == c.size()) return run;  // \s+ at the end of the text
  return run > 1 ? run - 1 : 1;   // (?!\S) leaves the last space for the next piece; a lone one is \s+
}

// Pieces of one span [0, c.size()) as code point counts.
void scan_gpt2(const std::vector<Cp>& c, std::vector<size_t>& lens) {
  size_t i = 0;
  const size_t n = c.size();
  while (i < n) {
    size_t len = contraction(c, i, false);
    if (!len) {
      size_t j = i;
      if (c[j].cp == ' ' && j + 1 < n && !is_whitespace(c[j + 1].cp)) ++j;
      const uint32_t cp = c[j].cp;
      if (is_letter(cp)) { while (j < n && is_letter(c[j].cp)) ++j; len = j - i; }
      else if (is_number(cp)) { while (j < n && is_number(c[j].cp)) ++j; len = j - i; }
      else if (is_other(cp)) { while (j < n && is_other(c[j].cp)) ++j; len = j - i; }
      else len = whitespace_run(c, i);
    }
    lens.push_back(len);
    i += len;
  }
}

void scan_llama3(const std::vector<Cp>& c, std::vector<size_t>& lens, size_t max_digits) {
  size_t i = 0;
  const size_t n = c.size();
  while (i < n) {
    size_t len = contraction(c, i, true);
    const uint32_t cp = c[i].cp;
    if (!len) {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      size_t j = i;
      if (!is_letter(cp) && !is_number(cp) && !is_crlf(cp) && j + 1 < n && is_letter(c[j + 1].cp)) ++j;
      if (is_letter(c[j].cp)) {
        while (j < n && is_letter(c[j].cp)) ++j;
        len = j - i;
      }
    }
    if (!len && is_number(cp)) {  // \p{N}{1,max}
      size_t j = i;
      while (j < n && j - i < max_digits && is_number(c[j].cp)) ++j;
      len = j - i;
    }
    if (!len) {  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
      size_t j = i;
      if (cp == ' ' && j + 1 < n && is_other(c[j + 1].cp)) ++j;
      if (is_other(c[j].cp)) {
        while (j < n && is_other(c[j].cp)) ++j;
        while (j < n && is_crlf(c[j].cp)) ++j;
        len = j - i;
      }
    }
    if (!len && is_whitespace(cp)) {  // \s*[\r\n]+ : up to the last newline of the whitespace run
      size_t e = i, last_nl = n;
      while (e < n && is_whitespace(c[e].cp)) {
        if (is_crlf(c[e].cp)) last_nl = e;
        ++e;
      }
      len = last_nl != n ? last_nl + 1 - i : whitespace_run(c, i);
    }
    if (!len) len = 1;  // unreachable: every code point is letter, number, other or whitespace
    lens.push_back(len);
    i += len;
  }
}

}  // namespace

bool is_letter(uint32_t cp) { return in_ranges(kLetterRanges, cp); }
bool is_number(uint32_t cp) { return in_ranges(kNumberRanges, cp); }
bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

uint32_t byte_to_codepoint(uint8_t b) {
  // GPT-2 bytes_to_unicode: '!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves; the other 68 bytes to 256+k in order.
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
  if (printable(b)) return b;
  uint32_t k = 0;
  for (int x = 0; x < b; ++x)
    if (!printable(x)) ++k;
  return 256 + k;
}

const char* pretokenizer_name(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::Gpt2: return "gpt2";
    case PreTokenizer::SmolLM: return "smollm";
    case PreTokenizer::Llama3: return "llama3";
    case PreTokenizer::Qwen2: return "qwen2";
  }
  return "?";
}

std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer p, const std::string& text) {
  std::vector<std::pair<size_t, size_t>> out;
  const std::vector<Cp> all = decode_utf8(text, 0, text.size());
  // SmolLM: every \p{N} is split off first (HF Digits(individual_digits=true)); the GPT-2 regex then runs on
  // each span between them.
  std::vector<std::pair<size_t, size_t>> spans;  // code point index ranges
  if (p == PreTokenizer::SmolLM) {
    size_t s = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (is_number(all[i].cp)) {
        if (i > s) spans.push_back({s, i});
        spans.push_back({i, i + 1});
        s = i + 1;
      }
    }
    if (s < all.size()) spans.push_back({s, all.size()});
  } else if (!all.empty()) {
    spans.push_back({0, all.size()});
  }
  std::vector<size_t> lens;
  for (auto [a, b] : spans) {
    std::vector<Cp> c(all.begin() + a, all.begin() + b);
    lens.clear();
    if (p == PreTokenizer::Llama3) scan_llama3(c, lens, 3);
    else if (p == PreTokenizer::Qwen2) scan_llama3(c, lens, 1);
    else scan_gpt2(c, lens);
    size_t k = 0;
    for (size_t l : lens) {
      out.push_back({c[k].begin, c[k + l - 1].end});
      k += l;
    }
  }
  return out;
}

namespace {

PreTokenizer parse_pretokenizer(const nlohmann::json& j, const std::string& path, bool* add_prefix_space) {
  if (j.is_null()) fail(path + ": tokenizer has no pre_tokenizer; only byte-level BPE tokenizers are supported");
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") {
    *add_prefix_space = j.value("add_prefix_space", false);
    if (!j.value("use_regex", true)) fail(path + ": ByteLevel pre_tokenizer with use_regex=false is not supported");
    return PreTokenizer::Gpt2;
  }
  if (type != "Sequence" || !j.contains("pretokenizers")) {
    fail(path + ": pre_tokenizer type '" + type + "' is not supported (expected ByteLevel or a Sequence of Digits/Split + ByteLevel)");
  }
  bool digits = false, bytelevel = false;
  int split = 0;  // 0 none, 3 llama3, 1 qwen2
  for (const auto& p : j["pretokenizers"]) {
    const std::string t = p.value("type", "");
    if (t == "Digits") {
      if (!p.value("individual_digits", false)) fail(path + ": Digits pre_tokenizer without individual_digits is not supported");
      digits = true;
    } else if (t == "ByteLevel") {
      bytelevel = true;
      *add_prefix_space = p.value("add_prefix_space", false);
      if (p.value("use_regex", true) && split) fail(path + ": Split followed by a regex ByteLevel is not supported");
    } else if (t == "Split") {
      std::string pat;
      if (p.contains("pattern") && p["pattern"].contains("Regex")) pat = p["pattern"]["Regex"].get<std::string>();
      if (pat.find("\\p{N}{1,3}") != std::string::npos && pat.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos) split = 3;
      else if (pat.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|") != std::string::npos) split = 1;
      else fail(path + ": Split pre_tokenizer pattern is neither Llama 3's nor Qwen2's: " + pat.substr(0, 80));
    } else {
      fail(path + ": pre_tokenizer '" + t + "' is not supported");
    }
  }
  if (!bytelevel) fail(path + ": pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported");
  if (split == 3) return PreTokenizer::Llama3;
  if (split == 1) return PreTokenizer::Qwen2;
  return digits ? PreTokenizer::SmolLM : PreTokenizer::Gpt2;
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(path + ": invalid JSON: " + e.what());
  }
  Tokenizer t;
  try {
    const auto& m = j.at("model");
    if (m.value("type", "BPE") != "BPE") fail(path + ": model type '" + m.value("type", "") + "', expected BPE");
    t.ignore_merges_ = m.contains("ignore_merges") && m["ignore_merges"].is_boolean() && m["ignore_merges"].get<bool>();
    t.byte_fallback_ = m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>();
    const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
    const nlohmann::json norm = j.value("normalizer", nlohmann::json());
    // SentencePiece-style: a Prepend('▁') / Replace(' ' -> '▁') normalizer, or a Metaspace pre-tokenizer.
    bool norm_prepend = false, norm_replace = false;
    auto scan_norm = [&](const nlohmann::json& n) {
      const std::string ty = n.value("type", "");
      if (ty == "Prepend" && n.value("prepend", "") == "\xe2\x96\x81") norm_prepend = true;
      if (ty == "Replace" && n.value("content", "") == "\xe2\x96\x81") norm_replace = true;
    };
    if (norm.is_object()) {
      if (norm.value("type", "") == "Sequence" && norm.contains("normalizers"))
        for (const auto& n : norm["normalizers"]) scan_norm(n);
      else scan_norm(norm);
    }
    const bool metaspace = pre.is_object() && pre.value("type", "") == "Metaspace";
    if (norm_replace || metaspace || (t.byte_fallback_ && pre.is_null())) {
      t.spm_ = true;
      t.spm_prepend_ = norm_prepend ? Prepend::Every : Prepend::Never;
      if (metaspace) {
        const std::string scheme = pre.value("prepend_scheme", pre.value("add_prefix_space", true) ? "always" : "never");
        t.spm_prepend_ = scheme == "first" ? Prepend::First : scheme == "never" ? Prepend::Never : Prepend::Always;
        t.spm_split_ = pre.value("split", true);
      }
      if (m.contains("unk_token") && m["unk_token"].is_string()) {
        auto u = m["vocab"].find(m["unk_token"].get<std::string>());
        if (u != m["vocab"].end()) t.unk_id_ = u->get<int32_t>();
      }
    } else {
      t.pre_ = parse_pretokenizer(pre, path, &t.add_prefix_space_);
      if (t.byte_fallback_) fail(path + ": byte_fallback with a byte-level pre-tokenizer is not supported");
    }
    int32_t max_id = -1;
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) max_id = std::max(max_id, it.value().get<int32_t>());
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"]) max_id = std::max(max_id, a.at("id").get<int32_t>());
    if (max_id < 0) fail(path + ": empty vocabulary");
    t.id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
    t.special_.assign(t.id_to_token_.size(), 0);
    t.added_.assign(t.id_to_token_.size(), 0);
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) {
      const int32_t id = it.value().get<int32_t>();
      if (id < 0) fail(path + ": negative token id for '" + it.key() + "'");
      t.id_to_token_[id] = it.key();
      t.token_to_id_[it.key()] = id;
    }
    if (j.contains("added_tokens")) {
      for (const auto& a : j["added_tokens"]) {
        const int32_t id = a.at("id").get<int32_t>();
        const std::string c = a.at("content").get<std::string>();
        t.id_to_token_[id] = c;
        t.token_to_id_[c] = id;
        t.added_[id] = 1;
        t.special_[id] = a.value("special", false) ? 1 : 0;
        t.added_contents_.push_back(c);
      }
    }
    std::sort(t.added_contents_.begin(), t.added_contents_.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, byte_to_codepoint(static_cast<uint8_t>(b)));
      auto it = t.token_to_id_.find(s);
      t.byte_ids_[b] = it == t.token_to_id_.end() ? -1 : it->second;
      char fb[8];
      std::snprintf(fb, sizeof(fb), "<0x%02X>", b);
      auto f = t.token_to_id_.find(fb);
      t.fallback_ids_[b] = f == t.token_to_id_.end() ? -1 : f->second;
    }
    int32_t rank = 0;
    for (const auto& mg : m.at("merges")) {
      std::string a, b;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) fail(path + ": merge '" + s + "' has no space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = mg.at(0).get<std::string>();
        b = mg.at(1).get<std::string>();
      }
      auto ia = t.token_to_id_.find(a), ib = t.token_to_id_.find(b), im = t.token_to_id_.find(a + b);
      if (ia == t.token_to_id_.end() || ib == t.token_to_id_.end() || im == t.token_to_id_.end()) {
        fail(path + ": merge '" + a + " " + b + "' uses a token missing from the vocabulary");
      }
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
      t.merges_.emplace(key, std::make_pair(rank++, im->second));
    }
    // BOS: a TemplateProcessing post-processor that starts with a special token (Llama 3).
    if (j.contains("post_processor") && j["post_processor"].is_object()) {
      const auto& pp = j["post_processor"];
      if (pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && !pp["single"].empty() &&
          pp["single"][0].contains("SpecialToken")) {
        const std::string tok = pp["single"][0]["SpecialToken"].at("id").get<std::string>();
        auto it = t.token_to_id_.find(tok);
        if (it != t.token_to_id_.end()) {
          t.add_bos_ = true;
          t.bos_id_ = it->second;
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": unexpected tokenizer.json structure: " + e.what());
  }
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path + ": cannot open tokenizer");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(ss.str(), path);
}

int32_t Tokenizer::token_id(const std::string& token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

void Tokenizer::bpe(const std::string& piece, std::vector<int32_t>* out) const {
  auto cached = cache_.find(piece);
  if (cached != cache_.end()) {
    out->insert(out->end(), cached->second.begin(), cached->second.end());
    return;
  }
  std::vector<int32_t> sym;
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char b : piece) append_utf8(mapped, byte_to_codepoint(b));
    auto whole = token_to_id_.find(mapped);
    if (whole != token_to_id_.end()) {
      out->push_back(whole->second);
      return;
    }
  }
  sym.reserve(piece.size());
  if (spm_) {
    // Characters; one missing from the vocabulary becomes <0xXX> byte tokens (byte_fallback) or unk.
    for (const Cp& c : decode_utf8(piece, 0, piece.size())) {
      auto it = token_to_id_.find(piece.substr(c.begin, c.end - c.begin));
      if (it != token_to_id_.end() && !added_[it->second]) {
        sym.push_back(it->second);
        continue;
      }
      bool ok = byte_fallback_;
      for (size_t k = c.begin; ok && k < c.end; ++k) ok = fallback_ids_[static_cast<uint8_t>(piece[k])] >= 0;
      if (ok) {
        for (size_t k = c.begin; k < c.end; ++k) sym.push_back(fallback_ids_[static_cast<uint8_t>(piece[k])]);
      } else if (unk_id_ >= 0) {
        if (sym.empty() || sym.back() != unk_id_) sym.push_back(unk_id_);  // fuse_unk
      } else {
        fail("tokenizer: character U+" + std::to_string(c.cp) + " has no token, no byte fallback and no unk token");
      }
    }
  } else {
    for (unsigned char b : piece) {
      if (byte_ids_[b] < 0) fail("tokenizer: byte " + std::to_string(b) + " has no token in the vocabulary");
      sym.push_back(byte_ids_[b]);
    }
  }
  merge(sym);
  if (cache_.size() < 200000 && piece.size() <= 256) cache_.emplace(piece, sym);
  out->insert(out->end(), sym.begin(), sym.end());
}

void Tokenizer::merge(std::vector<int32_t>& sym) const {
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sym[i])) << 32) | static_cast<uint32_t>(sym[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best_pos = i;
      }
    }
    if (best_id < 0) break;
    // Merge every occurrence of the best pair, left to right (GPT-2's bpe()).
    const int32_t a = sym[best_pos], b = sym[best_pos + 1];
    std::vector<int32_t> next;
    next.reserve(sym.size());
    for (size_t i = 0; i < sym.size();) {
      if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
        next.push_back(best_id);
        i += 2;
      } else {
        next.push_back(sym[i++]);
      }
    }
    sym.swap(next);
  }
}

void Tokenizer::encode_segment(const std::string& s, bool first, std::vector<int32_t>* out) const {
  if (s.empty()) return;
  if (!spm_) {
    std::string src = s;
    if (add_prefix_space_ && src[0] != ' ') src = " " + src;
    for (auto [b, e] : pretokenize(pre_, src)) bpe(src.substr(b, e - b), out);
    return;
  }
  static const std::string kMeta = "\xe2\x96\x81";  // '▁' U+2581
  std::string n;
  for (char ch : s) {
    if (ch == ' ') n += kMeta;
    else n += ch;
  }
  const bool starts = n.compare(0, kMeta.size(), kMeta) == 0;
  if (spm_prepend_ == Prepend::Every || (spm_prepend_ == Prepend::Always && !starts) ||
      (spm_prepend_ == Prepend::First && first && !starts)) {
    n = kMeta + n;
  }
  if (!spm_split_) {
    bpe(n, out);
    return;
  }
  size_t b = 0;  // pieces start at each '▁' (the delimiter is merged with what follows it)
  for (size_t i = 1; i <= n.size(); ++i) {
    if (i == n.size() || n.compare(i, kMeta.size(), kMeta) == 0) {
      if (i > b) bpe(n.substr(b, i - b), out);
      b = i;
    }
  }
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool parse_special) const {
  std::vector<int32_t> out;
  size_t seg_start = 0;
  auto encode_plain = [&](const std::string& s) { encode_segment(s, seg_start == 0, &out); };
  if (!parse_special || added_contents_.empty()) {
    encode_plain(text);
    return out;
  }
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const std::string* hit = nullptr;
    for (const auto& c : added_contents_) {
      if (!c.empty() && text.compare(i, c.size(), c) == 0) { hit = &c; break; }
    }
    if (!hit) { ++i; continue; }
    seg_start = start;
    encode_plain(text.substr(start, i - start));
    out.push_back(token_to_id_.at(*hit));
    i += hit->size();
    start = i;
  }
  seg_start = start;
  encode_plain(text.substr(start));
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return std::string();
  const std::string& t = id_to_token_[id];
  if (added_[id]) return t;
  if (spm_) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
      return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    }
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    for (int b = 0; b < 256; ++b) inv[byte_to_codepoint(static_cast<uint8_t>(b))] = b;
    return inv;
  }();
  std::string out;
  for (const Cp& c : decode_utf8(t, 0, t.size())) {
    if (c.cp < inverse.size() && inverse[c.cp] >= 0) out += static_cast<char>(inverse[c.cp]);
    else out += t.substr(c.begin, c.end - c.begin);  // not byte-level: keep as is
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += token_bytes(id);
  }
  if (spm_ && !out.empty() && out[0] == ' ') out.erase(0, 1);  // the '▁' the encoder prepended
  return out;
}

// ---- chat templates ----------------------------------------------------------------------------------------

ChatFormat detect_chat_format(const std::string& t) {
  if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::ChatML;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatFormat::Llama3;
  if (t.find("[INST]") != std::string::npos) return ChatFormat::Llama2;
  return ChatFormat::None;
}

std::string default_system_message(const std::string& t) {
  // SmolLM2: "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}"
  const std::string open = "<|im_start|>system\n";
  const size_t a = t.find(open);
  if (a == std::string::npos) return std::string();
  const size_t b = t.find("<|im_end|>", a);
  if (b == std::string::npos) return std::string();
  std::string s = t.substr(a + open.size(), b - a - open.size());
  if (s.find("{{") != std::string::npos || s.find("{%") != std::string::npos || s.find('\'') != std::string::npos) {
    return std::string();  // a template expression, not a literal message
  }
  return s;
}

std::string apply_chat_template(ChatFormat f, const std::string& prompt, const std::string& system) {
  switch (f) {
    case ChatFormat::ChatML: {
      std::string s;
      if (!system.empty()) s += "<|im_start|>system\n" + system + "<|im_end|>\n";
      return s + "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
    }
    case ChatFormat::Llama3: {
      std::string s = "<|begin_of_text|>";
      if (!system.empty()) s += "<|start_header_id|>system<|end_header_id|>\n\n" + system + "<|eot_id|>";
      return s + "<|start_header_id|>user<|end_header_id|>\n\n" + prompt +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    case ChatFormat::Llama2: {
      if (system.empty()) return "[INST] " + prompt + " [/INST]";
      return "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n" + prompt + " [/INST]";
    }
    case ChatFormat::None: break;
  }
  return prompt;
}

}  // namespace nvfp4::model
