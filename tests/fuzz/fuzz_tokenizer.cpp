// SPDX-License-Identifier: Apache-2.0
// Tokenizer input: arbitrary bytes through the character, word and
// SentencePiece tokenizers (trained once on a fixed text), and the UTF-8
// checks every loader applies.
#include <memory>

#include "fuzz_target.h"
#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"

namespace {

std::unique_ptr<multihead::Tokenizer> trained(const char* kind) {
  multihead::TokenizerConfig c;
  c.kind = multihead::parse_tokenizer_kind(kind);
  c.vocab_size = 64;
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i)
    texts.push_back("Call me Ishmael. Some years ago, never mind how long precisely, the whale " + std::to_string(i) +
                    " \xc3\xa9t\xc3\xa9 \xe2\x80\x94 ok");
  return multihead::train_tokenizer(c, texts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  static const std::unique_ptr<Tokenizer> toks[] = {trained("char"), trained("word"), trained("sentencepiece")};
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::expect_clean([&] { check_utf8(text, "fuzz"); });
  const std::string clean = sanitize_utf8(text);
  for (const auto& t : toks) {
    fuzz::expect_clean([&] {
      const std::vector<std::int64_t> ids = t->encode(clean);
      for (std::int64_t id : ids)
        if (id < 0 || id >= t->vocab_size()) __builtin_trap();  // every id indexes the embedding
      (void)t->decode(ids);
    });
  }
  return 0;
}
