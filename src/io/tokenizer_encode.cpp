// Tokenizer::Impl's encoding steps: normalization (NFC), cutting out added tokens, the
// pre-tokenizers, and the BPE merges of a piece (a min-heap over merge ranks, leftmost on ties, as
// tokenizers/src/models/bpe/word.rs; short pieces cached).
#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>
#include <string>

#include "core/check.h"
#include "io/tokenizer_impl.h"

namespace flashdllm {

using namespace tokenizer_detail;  // the pipeline's components (tokenizer_impl.h)

std::string Tokenizer::Impl::normalize(std::string_view s) const {
  if (!nfc || s.empty()) return std::string(s);
  auto nfc_valid = [](std::string_view v, std::string& out) {
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(v.data()), static_cast<utf8proc_ssize_t>(v.size()), &dst,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) {
      FDLLM_FAIL(ErrorCode::kInternal, "tokenizer: NFC normalization failed: {}", utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    std::free(dst);
  };
  std::string out;
  out.reserve(s.size());
  if (is_valid_utf8(s)) {
    nfc_valid(s, out);
    return out;
  }
  // Invalid UTF-8 (cannot come from HF, whose input is a str): normalize the valid runs only.
  size_t run = 0, i = 0;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s, i);
    if (!st.valid) {
      if (i > run) nfc_valid(s.substr(run, i - run), out);
      out.append(s.substr(i, st.len));
      run = i + st.len;
    }
    i += st.len;
  }
  if (s.size() > run) nfc_valid(s.substr(run), out);
  return out;
}

std::vector<Segment> Tokenizer::Impl::split_added(std::vector<Segment> segments, const TokenTrie& trie) const {
  if (trie.empty()) return segments;
  std::vector<Segment> out;
  out.reserve(segments.size());
  for (auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string_view s = seg.text;
    size_t start_offset = 0;  // end of the last accepted match
    size_t search = 0;
    while (auto m = trie.find(s, search)) {
      auto [start, stop, id] = *m;
      search = stop;
      const AddedToken& tok = added_r.at(id);
      if (tok.single_word) {
        bool start_ok = true, stop_ok = true;
        if (start > 0) {  // last character before the match must not be a word character
          size_t k = start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          const Utf8Step st = utf8_step(s, k);
          start_ok = !(st.valid && k + st.len == start && is_word_char(st.cp));
        }
        if (stop < s.size()) {
          const Utf8Step st = utf8_step(s, stop);
          stop_ok = !(st.valid && is_word_char(st.cp));
        }
        if (!start_ok || !stop_ok) continue;
      }
      if (tok.lstrip) {  // swallow the whitespace run before the token (not before start_offset)
        size_t k = start;
        while (k > start_offset) {
          size_t b = k - 1;
          while (b > start_offset && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
          const Utf8Step st = utf8_step(s, b);
          if (!(st.valid && b + st.len == k && is_white_space(st.cp))) break;
          k = b;
        }
        start = k;
      }
      if (tok.rstrip) {
        while (stop < s.size()) {
          const Utf8Step st = utf8_step(s, stop);
          if (!(st.valid && is_white_space(st.cp))) break;
          stop += st.len;
        }
        // The match iterator still resumes at the end of the token itself, as in HF.
      }
      if (start_offset < start) out.push_back({std::string(s.substr(start_offset, start - start_offset)), -1});
      out.push_back({std::string(), id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({std::string(s.substr(start_offset)), -1});
  }
  return out;
}

std::vector<std::string> Tokenizer::Impl::pre_tokenize(std::string_view s) const {
  std::vector<std::string> pieces;
  if (s.empty()) return pieces;
  pieces.emplace_back(s);
  std::vector<std::string> next;
  for (const auto& step : pre_steps) {
    next.clear();
    if (const auto* sp = std::get_if<SplitStep>(&step)) {
      for (const auto& p : pieces) {
        auto spans = regex_find_matches(*sp->regex, p);
        if (sp->invert) {
          for (auto& m : spans) m.flag = !m.flag;
        }
        split_by_behavior(p, std::move(spans), sp->behavior, next);
      }
    } else if (const auto* dg = std::get_if<DigitsStep>(&step)) {
      for (const auto& p : pieces) {
        split_by_behavior(p, char_find_matches(p, is_numeric),
                          dg->individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, next);
      }
    } else {
      const auto& bl = std::get<ByteLevelStep>(step);
      for (auto& p : pieces) {
        if (bl.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
        if (bl.use_regex) {
          split_by_behavior(p, regex_find_matches(*gpt2_regex, p), SplitBehavior::kIsolated, next);
        } else {
          next.push_back(std::move(p));
        }
      }
      for (auto& p : next) p = byte_level_map(p);
    }
    pieces.swap(next);
  }
  return pieces;
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(piece); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() < kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe_merge_word(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kCacheCapacity) cache.clear();
    cache.emplace(std::string(piece),
                  std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Tokenizer::Impl::bpe_merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes covered; 0 once merged into its left neighbour
  };
  std::vector<Symbol> syms;
  syms.reserve(w.size());
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(syms.size());
    if (n > 0) syms.back().next = n;
    syms.push_back({id, n - 1, -1, len});
  };
  // Initial symbols: one per character; characters missing from the vocabulary become unk (fused
  // if fuse_unk) or are dropped when there is no unk token, as in tokenizers' BPE::merge_word.
  bool unk_pending = false;
  uint32_t unk_len = 0;
  for (size_t i = 0; i < w.size();) {
    const uint32_t len = utf8_step(w, i).len;
    const auto it = vocab.find(w.substr(i, len));
    if (it != vocab.end()) {
      if (unk_pending) add(*unk_id, unk_len);
      unk_pending = false;
      add(it->second, len);
    } else if (unk_id) {
      if (unk_pending && fuse_unk) {
        unk_len += len;
      } else {
        if (unk_pending) add(*unk_id, unk_len);
        unk_pending = true;
        unk_len = len;
      }
    }
    i += len;
  }
  if (unk_pending) add(*unk_id, unk_len);

  struct Merge {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<uint32_t, int32_t>* {
    const auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const auto* m = lookup(syms[i].id, syms[i + 1].id)) {
      queue.push({m->first, static_cast<int32_t>(i), m->second});
    }
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const Symbol right = syms[cur.next];
    const auto* m = lookup(cur.id, right.id);
    if (!m || m->second != top.new_id) continue;  // stale entry
    const int32_t right_pos = cur.next;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[right_pos].len = 0;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* pm = lookup(syms[cur.prev].id, cur.id)) queue.push({pm->first, cur.prev, pm->second});
    }
    if (cur.next >= 0) {
      if (const auto* nm = lookup(cur.id, syms[cur.next].id)) queue.push({nm->first, top.pos, nm->second});
    }
  }
  for (const auto& s : syms) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace flashdllm
