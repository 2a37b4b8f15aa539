// Tokenizer encode throughput with the Qwen3 tokenizer.json (from the cache that
// scripts/fetch-reference-tokenizers.sh fills): a few MB of mixed text (the parity corpus
// generator: English words, code, numbers, whitespace, CJK, kana, Hangul, Cyrillic, emoji,
// LaTeX, special tokens), encoded
//   - as shipped: PCRE2 JIT pre-tokenizer, merge ranks in an open-addressing table keyed by
//     the pair of ids, per-piece cache;
//   - baseline: the same code with the per-piece cache disabled (every piece runs BPE), i.e.
//     what a straightforward implementation does;
// and, when several threads are available, from 2 threads sharing one Tokenizer.
// Ends with `name: value` lines.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "tests/tokenizer/parity_corpus.h"

using grpo::core::Tokenizer;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : std::string(GRPO_SOURCE_DIR) + "/.cache/reference-tokenizers/qwen3";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    std::fprintf(stderr,
                 "bench_tokenizer: %s/tokenizer.json is missing: run scripts/fetch-reference-tokenizers.sh "
                 "(or pass a tokenizer folder as the first argument)\n",
                 dir.c_str());
    return 1;
  }
  auto t0 = Clock::now();
  Tokenizer tok = Tokenizer::load(dir);
  double load_s = seconds_since(t0);

  // ~4 MB of text, in documents of a few KB.
  std::vector<std::string> docs;
  std::size_t bytes = 0;
  std::vector<std::string> pieces = grpo::testing::corpus_generated(6000, 99);
  for (std::size_t i = 0; bytes < (4u << 20); i = (i + 1) % pieces.size()) {
    std::string doc;
    while (doc.size() < 4096) doc += pieces[(i++ * 7919) % pieces.size()] + " ";
    bytes += doc.size();
    docs.push_back(std::move(doc));
  }
  double mb = static_cast<double>(bytes) / 1e6;

  auto run = [&](std::size_t begin, std::size_t step, std::size_t& tokens) {
    std::vector<int> ids;
    for (std::size_t i = begin; i < docs.size(); i += step) {
      ids.clear();
      tok.encode_into(docs[i], ids);
      tokens += ids.size();
    }
  };

  std::size_t tokens = 0;
  run(0, 1, tokens);  // warm-up (fills the piece cache, as in a long training run)
  tokens = 0;
  t0 = Clock::now();
  run(0, 1, tokens);
  double cached_s = seconds_since(t0);

  tok.set_cache_enabled(false);
  std::size_t tokens_nocache = 0;
  t0 = Clock::now();
  run(0, 1, tokens_nocache);
  double nocache_s = seconds_since(t0);
  tok.set_cache_enabled(true);
  if (tokens_nocache != tokens) {
    std::fprintf(stderr, "bench_tokenizer: token counts differ with and without the cache (%zu vs %zu)\n", tokens,
                 tokens_nocache);
    return 1;
  }

  std::size_t t_a = 0, t_b = 0;
  run(0, 1, t_a);  // refill the cache
  t_a = 0;
  t0 = Clock::now();
  std::thread th([&] { run(1, 2, t_b); });
  run(0, 2, t_a);
  th.join();
  double two_threads_s = seconds_since(t0);

  std::printf("tokenizer: %s\n", dir.c_str());
  std::printf("text: %.2f MB in %zu documents, %zu tokens (%.2f bytes/token)\n", mb, docs.size(), tokens,
              static_cast<double>(bytes) / static_cast<double>(tokens));
  std::printf("%-44s %10s %12s\n", "variant", "seconds", "MB/s");
  std::printf("%-44s %10.3f %12.2f\n", "encode, piece cache (shipped)", cached_s, mb / cached_s);
  std::printf("%-44s %10.3f %12.2f\n", "encode, no piece cache (baseline BPE)", nocache_s, mb / nocache_s);
  std::printf("%-44s %10.3f %12.2f\n", "encode, piece cache, 2 threads", two_threads_s, mb / two_threads_s);
  std::printf("tokenizer_load_seconds: %.3f\n", load_s);
  std::printf("tokenizer_encode_mb_per_s: %.2f\n", mb / cached_s);
  std::printf("tokenizer_encode_nocache_mb_per_s: %.2f\n", mb / nocache_s);
  std::printf("tokenizer_cache_speedup: %.2f\n", nocache_s / cached_s);
  std::printf("tokenizer_encode_2threads_mb_per_s: %.2f\n", mb / two_threads_s);
  std::printf("tokenizer_tokens_per_s: %.0f\n", static_cast<double>(tokens) / cached_s);
  return 0;
}
