// SPDX-License-Identifier: Apache-2.0
// Loaders, tokenizers and batching, on small data the tests write themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "multihead/core/rng.h"
#include "multihead/data/batching.h"
#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("multihead_data_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << s;
  }
  template <typename F>
  std::string error_of(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir;
};

TEST_F(TempDir, AclImdbLayout) {
  write(dir / "train/pos/1_9.txt", "great film");
  write(dir / "train/pos/0_10.txt", "loved it");
  write(dir / "train/neg/2_1.txt", "awful");
  TextDataset ds = load_aclimdb(dir.string(), "train");
  ASSERT_EQ(ds.examples.size(), 3u);
  EXPECT_EQ(ds.examples[0].text, "awful");  // neg first, files in sorted order
  EXPECT_EQ(ds.examples[0].label, 0);
  EXPECT_EQ(ds.examples[1].text, "loved it");
  EXPECT_EQ(ds.label_names, (std::vector<std::string>{"neg", "pos"}));
  write(dir / "train/pos/3_x.txt", "bad name");
  EXPECT_EQ(error_of([&] { load_aclimdb(dir.string(), "train"); }),
            (dir / "train/pos/3_x.txt").string() + ": rating in the file name is not a number");
  EXPECT_EQ(error_of([&] { load_aclimdb(dir.string(), "test"); }),
            (dir / "test/neg").string() + ": not a directory (expected the aclImdb layout test/{pos,neg})");
}

TEST_F(TempDir, DelimitedFilesWithQuotesAndErrors) {
  write(dir / "a.csv", "id,text,label\n1,\"hello, world\",spam\n2,\"multi\nline \"\"quoted\"\"\",ham\n3,plain,spam\n");
  TextDataset ds = load_delimited((dir / "a.csv").string(), ',', "text", "label");
  ASSERT_EQ(ds.examples.size(), 3u);
  EXPECT_EQ(ds.examples[0].text, "hello, world");
  EXPECT_EQ(ds.examples[1].text, "multi\nline \"quoted\"");
  EXPECT_EQ(ds.label_names, (std::vector<std::string>{"spam", "ham"}));
  EXPECT_EQ(ds.examples[1].label, 1);
  write(dir / "b.tsv", "text\tlabel\nx\t1\ny\t0\n");
  TextDataset t = load_delimited((dir / "b.tsv").string(), '\t', "text", "label");
  EXPECT_EQ(t.examples[0].label, 1);  // integer labels in numeric order
  const std::string bad = (dir / "c.csv").string();
  write(bad, "text,label\nok,1\ntoo,many,fields\n");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }), bad + ": line 3: 3 fields, the header has 2");
  write(bad, "text,label\n\"open,1\n");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }), bad + ": line 2: unterminated quoted field");
  write(bad, "text,label\nok,1\n");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "body", "label"); }),
            bad + ": line 1: no column named 'body' (the columns are: 'text', 'label'; --text-column names another)");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "class"); }),
            bad + ": line 1: no column named 'class' (the columns are: 'text', 'label'; --label-column names another)");
  write(bad, "text,label\n");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }), bad + ": no data rows after the header");
  write(bad, std::string("text,label\n\xff\xfe,1\n"));
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }), bad + ": invalid UTF-8 at byte 11");
  // Integer labels: the values present are the classes, in numeric order.
  // (Found by fuzzing, when a value was a class number: 100220022 asked for
  // that many classes; 1..5 made a sixth, empty class 0.)
  write(bad, "label\ttext\n0\tfirst\n100220022\tsecond\n");
  EXPECT_EQ(load_delimited(bad, '\t', "text", "label").label_names, (std::vector<std::string>{"0", "100220022"}));
  write(bad, "text,label\na,5\nb,1\nc,3\nd,10\ne,007\nf,1\n");
  const TextDataset stars = load_delimited(bad, ',', "text", "label");
  EXPECT_EQ(stars.label_names, (std::vector<std::string>{"1", "3", "5", "7", "10"}));
  EXPECT_EQ((std::vector<std::int64_t>{stars.examples[0].label, stars.examples[1].label, stars.examples[2].label,
                                       stars.examples[3].label, stars.examples[4].label, stars.examples[5].label}),
            (std::vector<std::int64_t>{2, 0, 1, 4, 3, 0}));
  // Digits past an int64's reach are names, numbered in order of appearance.
  write(bad, "text,label\na,0\nb,1\nc,1234567890123456789012\n");
  EXPECT_EQ(load_delimited(bad, ',', "text", "label").label_names,
            (std::vector<std::string>{"0", "1", "1234567890123456789012"}));
  {
    std::string many = "text,label\n";
    for (int c = 0; c <= 1000; ++c) many += "t,class" + std::to_string(c) + "\n";
    write(bad, many);
    EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }),
              bad + ": more than 1000 distinct labels; a classifier takes at most 1000 classes");
  }
  // A label is printable text: a NUL inside one made a class that printed as another.
  write(bad, std::string("text,label\na,pos\nb,po\0s\n", 24));
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }),
            bad + ": line 3: the label has a control character (byte 0x00); labels are printable text");
  EXPECT_EQ(
      error_of([&] { parse_json_lines_dataset("{\"text\": \"a\", \"label\": \"x\\u0007\"}\n", "text", "label", bad); }),
      bad + ": line 1: the label has a control character (byte 0x07); labels are printable text");
  // Texts that are all empty train nothing.
  write(bad, "text,label\n,pos\n  ,neg\n\"\",pos\n");
  EXPECT_EQ(error_of([&] { load_delimited(bad, ',', "text", "label"); }),
            bad + ": every text is empty (or only white space): there is nothing to learn from");
  // One class would train to a constant and score 100%.
  write(bad, "text,label\na,pos\nb,pos\n");
  EXPECT_EQ(error_of([&] { check_two_classes(load_delimited(bad, ',', "text", "label"), bad); }),
            bad + ": every row has the label 'pos'; a classifier needs at least two classes");
  // A byte-order mark is not part of the first column's name.
  write(bad, "\xEF\xBB\xBFtext,label\na,pos\nb,neg\n");
  EXPECT_EQ(load_delimited(bad, ',', "text", "label").examples[1].text, "b");
}

TEST_F(TempDir, JsonLinesWithStringOrNumberLabels) {
  write(dir / "a.jsonl",
        "{\"body\": \"refund please\", \"kind\": \"billing\"}\n\n"
        "{\"body\": \"app crashes\", \"kind\": \"bug\", \"id\": 7}\r\n"
        "{\"body\": \"charged twice\", \"kind\": \"billing\"}\n");
  const std::string a = (dir / "a.jsonl").string();
  TextDataset ds = load_labelled_file(a, "jsonl", "body", "kind");
  ASSERT_EQ(ds.examples.size(), 3u);
  EXPECT_EQ(ds.examples[1].text, "app crashes");
  EXPECT_EQ(ds.label_names, (std::vector<std::string>{"billing", "bug"}));
  EXPECT_EQ(ds.examples[2].label, 0);
  write(dir / "b.jsonl", "{\"text\": \"x\", \"label\": 1}\n{\"text\": \"y\", \"label\": 0}\n");
  EXPECT_EQ(load_labelled_file((dir / "b.jsonl").string(), "jsonl", "text", "label").examples[0].label, 1);
  EXPECT_EQ(error_of([&] { load_labelled_file(a, "jsonl", "text", "kind"); }),
            a + ": line 1: no key named 'text' (the keys are: 'body', 'kind'; --text-column names another)");
  EXPECT_EQ(error_of([&] { load_labelled_file(a, "jsonl", "body", "label"); }),
            a + ": line 1: no key named 'label' (the keys are: 'body', 'kind'; --label-column names another)");
  const std::string bad = (dir / "c.jsonl").string();
  write(bad, "{\"text\": \"x\", \"label\": \"a\"}\n[1, 2]\n");
  EXPECT_EQ(error_of([&] { load_labelled_file(bad, "jsonl", "text", "label"); }), bad + ": line 2: not a JSON object");
  write(bad, "{\"text\": 3, \"label\": \"a\"}\n");
  EXPECT_EQ(error_of([&] { load_labelled_file(bad, "jsonl", "text", "label"); }),
            bad + ": line 1: 'text' is not a string");
  write(bad, "{\"text\": \"x\", \"label\": -1}\n");
  EXPECT_EQ(error_of([&] { load_labelled_file(bad, "jsonl", "text", "label"); }),
            bad + ": line 1: 'label' is not a string or a class number");
  write(bad, "\n\n");
  EXPECT_EQ(error_of([&] { load_labelled_file(bad, "jsonl", "text", "label"); }),
            bad + ": no records (expected one JSON object a line)");
  EXPECT_EQ(error_of([&] { load_labelled_file(bad, "xml", "text", "label"); }),
            "a labelled file is csv, tsv or jsonl, not 'xml'");
}

TEST_F(TempDir, SpamAssassinPackageLayout) {
  for (const char* g : {"easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"}) fs::create_directories(dir / g);
  write(dir / "easy-ham-1/00001.json",
        R"({"id":"00001","group":"easy-ham-1","text":"From: a\nSubject: hi\n\nlunch at noon?"})");
  write(dir / "spam-1/00002.json", R"({"id":"00002","group":"spam-1","text":"Subject: WIN\n\nclick \u00e9 now"})");
  TextDataset ds = load_spamassassin(dir.string());
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].text, "lunch at noon?");
  EXPECT_EQ(ds.examples[1].label, 1);
  EXPECT_EQ(ds.examples[1].text, "click \xc3\xa9 now");
  EXPECT_EQ(load_spamassassin(dir.string(), false).examples[0].text, "From: a\nSubject: hi\n\nlunch at noon?");
  write(dir / "spam-2/x.json", "{broken");
  EXPECT_NE(
      error_of([&] { load_spamassassin(dir.string()); }).find((dir / "spam-2/x.json").string() + ": not valid JSON"),
      std::string::npos);
  EXPECT_EQ(sanitize_utf8(std::string("a\xff"
                                      "b")),
            "a\xef\xbf\xbd"
            "b");
}

TEST(Splits, DeterministicDisjointAndComplete) {
  SplitIndices a = split_indices(100, 0.1, 0.2, 7), b = split_indices(100, 0.1, 0.2, 7);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.test.size(), 20u);
  EXPECT_EQ(a.validation.size(), 10u);
  std::vector<int> seen(100, 0);
  for (const auto* part : {&a.train, &a.validation, &a.test})
    for (auto i : *part) ++seen[static_cast<std::size_t>(i)];
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_NE(split_indices(100, 0.1, 0.2, 8).test, a.test);
}

// A stratified split holds each class in its share: of 100 examples, 90 of
// class 0 and 10 of class 1, the 20 test examples are 18 and 2, the 10
// validation ones 9 and 1, as StratifiedShuffleSplit allocates them.
TEST(Splits, StratifiedSplitsHoldEachClassInItsShare) {
  std::vector<std::int64_t> labels(100, 0);
  for (int i = 0; i < 100; i += 10) labels[static_cast<std::size_t>(i + 3)] = 1;
  const SplitIndices a = stratified_split_indices(labels, 0.1, 0.2, 7);
  EXPECT_EQ(a.train, stratified_split_indices(labels, 0.1, 0.2, 7).train);
  const auto count = [&](const std::vector<std::int64_t>& part, std::int64_t c) {
    return std::count_if(part.begin(), part.end(),
                         [&](std::int64_t i) { return labels[static_cast<std::size_t>(i)] == c; });
  };
  EXPECT_EQ(a.test.size(), 20u);
  EXPECT_EQ(a.validation.size(), 10u);
  EXPECT_EQ(count(a.test, 1), 2);
  EXPECT_EQ(count(a.validation, 1), 1);
  EXPECT_EQ(count(a.train, 1), 7);
  std::vector<int> seen(100, 0);
  for (const auto* part : {&a.train, &a.validation, &a.test})
    for (auto i : *part) ++seen[static_cast<std::size_t>(i)];
  for (int s : seen) EXPECT_EQ(s, 1);
  // Remainders go to the largest fractional parts: 7 of class 0 and 3 of
  // class 1 with a test fraction of 0.3 make 3 test examples, 2.1 and 0.9:
  // 2 and 1.
  const std::vector<std::int64_t> small = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1};
  const SplitIndices b = stratified_split_indices(small, 0.0, 0.3, 1);
  ASSERT_EQ(b.test.size(), 3u);
  EXPECT_EQ(std::count_if(b.test.begin(), b.test.end(),
                          [&](std::int64_t i) { return small[static_cast<std::size_t>(i)] == 1; }),
            1);
}

TEST_F(TempDir, TokenizersRoundTripAndSaveLoad) {
  const std::vector<std::string> texts = {"the cat sat on the mat", "the dog sat", "caf\xc3\xa9 au lait"};
  for (const char* kind : {"char", "word", "sentencepiece"}) {
    TokenizerConfig cfg;
    cfg.kind = parse_tokenizer_kind(kind);
    cfg.vocab_size = std::string(kind) == "sentencepiece" ? 40 : 1000;
    auto tok = train_tokenizer(cfg, texts);
    auto ids = tok->encode("the cat sat");
    ASSERT_FALSE(ids.empty()) << kind;
    for (auto id : ids) EXPECT_TRUE(id >= 0 && id < tok->vocab_size()) << kind;
    EXPECT_EQ(tok->decode(ids), "the cat sat") << kind;
    if (std::string(kind) == "sentencepiece") {
      // An id past the vocabulary is refused whole, not narrowed to another id.
      EXPECT_THROW(tok->decode({(std::int64_t{1} << 40) + ids[0]}), ShapeError);
      EXPECT_THROW(tok->decode({tok->vocab_size()}), ShapeError);
    }
    const fs::path d = dir / kind;
    fs::create_directories(d);
    tok->save(d.string());
    auto back = Tokenizer::load(d.string());
    EXPECT_EQ(back->encode("the cat sat"), ids) << kind;
    EXPECT_EQ(back->kind(), kind);
    EXPECT_EQ(tok->piece(kPadId), "<pad>") << kind;
  }
  for (const char* kind : {"char", "word", "sentencepiece", "wordpiece", "hf_bpe", "hf_unigram"})
    EXPECT_STREQ(tokenizer_kind_name(parse_tokenizer_kind(kind)), kind);
  TokenizerConfig wordpiece;
  wordpiece.kind = TokenizerKind::kWordPiece;  // a checkpoint's, read and never trained
  EXPECT_THROW(train_tokenizer(wordpiece, {"the cat sat"}), ConfigError);
  wordpiece.kind = TokenizerKind::kBpe;
  EXPECT_THROW(train_tokenizer(wordpiece, {"the cat sat"}), ConfigError);
  try {
    parse_tokenizer_kind("bpe");
    ADD_FAILURE() << "bpe is a SentencePiece model type, not a tokenizer";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "tokenizer must be sentencepiece, char, word, wordpiece, hf_bpe or hf_unigram, got \"bpe\" (did you "
                 "mean 'sentencepiece'?)");
  }
  TokenizerConfig capped;
  capped.kind = TokenizerKind::kWord;
  capped.vocab_size = 6;  // 4 specials + the 2 most frequent words ("the", "sat")
  auto w = train_tokenizer(capped, texts);
  EXPECT_EQ(w->vocab_size(), 6);
  EXPECT_EQ(w->encode("the mat"), (std::vector<std::int64_t>{4, kUnkId}));
  write(dir / "bad/tokenizer.json", R"({"type": "bpe2"})");
  EXPECT_EQ(error_of([&] { Tokenizer::load((dir / "bad").string()); }),
            (dir / "bad/tokenizer.json").string() + ": unknown tokenizer type \"bpe2\"");
}

// encode_prefix(text, n) is encode(text) cut to n tokens, for every kind,
// over texts with every kind of white space, long runs of it, and n around
// the prefixes it tries (6 bytes a token, doubled).
TEST(Tokenizers, APrefixEncodesToTheWholeTextsFirstTokens) {
  Rng rng(8);
  const std::vector<std::string> words = {"spam", "ham", "caf\xc3\xa9", "x", "offer!!", "viagra", "re:", "42", "--"};
  const std::vector<std::string> spaces = {" ", "  ", "\n", "\t", "\r\n", " \n\n "};
  std::vector<std::string> texts;
  for (int t = 0; t < 40; ++t) {
    std::string text;
    const std::uint32_t n = 1 + rng.next_u32() % 600;
    for (std::uint32_t w = 0; w < n; ++w)
      text += words[rng.next_u32() % words.size()] + spaces[rng.next_u32() % spaces.size()];
    texts.push_back(text);
  }
  for (const char* kind : {"char", "word", "sentencepiece"}) {
    TokenizerConfig cfg;
    cfg.kind = parse_tokenizer_kind(kind);
    cfg.vocab_size = std::string(kind) == "sentencepiece" ? 60 : 1000;
    auto tok = train_tokenizer(cfg, texts);
    for (const std::string& text : texts) {
      const std::vector<std::int64_t> whole = tok->encode(text);
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{5}, std::size_t{63},
                                  std::size_t{64}, std::size_t{383}, whole.size(), whole.size() + 9}) {
        const std::vector<std::int64_t> want(whole.begin(),
                                             whole.begin() + static_cast<std::ptrdiff_t>(std::min(n, whole.size())));
        ASSERT_EQ(tok->encode_prefix(text, n), want) << kind << ", " << n << " of " << whole.size() << " tokens";
      }
    }
  }
}

// Answering batches: sorted by length, every input once, no batch over the
// token budget but a lone input longer than it, inputs of one length in
// their order.
TEST(Batching, LengthSortedBatchesKeepToTheTokenBudget) {
  std::vector<std::int64_t> lengths;
  Rng rng(2);
  for (int i = 0; i < 500; ++i) lengths.push_back(1 + rng.next_u32() % 400);
  lengths.push_back(900);
  const auto batches = length_sorted_batches(lengths, 4096);
  std::vector<std::int64_t> seen;
  std::int64_t last = 0;
  for (const auto& b : batches) {
    std::int64_t longest = 0;
    for (const std::int64_t i : b) {
      const std::int64_t len = lengths[static_cast<std::size_t>(i)];
      EXPECT_GE(len, last);
      if (len == last && !seen.empty() && lengths[static_cast<std::size_t>(seen.back())] == len) {
        EXPECT_GT(i, seen.back());
      }
      last = len;
      longest = std::max(longest, len);
      seen.push_back(i);
    }
    EXPECT_TRUE(static_cast<std::int64_t>(b.size()) * longest <= 4096 || b.size() == 1);
  }
  EXPECT_EQ(batches.back(), std::vector<std::int64_t>{500});  // 900 tokens alone
  std::sort(seen.begin(), seen.end());
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<std::int64_t>(i));
  EXPECT_EQ(length_sorted_batches({5, 5, 5}, 4), (std::vector<std::vector<std::int64_t>>{{0}, {1}, {2}}));
  EXPECT_EQ(length_sorted_batches({3, 1, 2}, 6), (std::vector<std::vector<std::int64_t>>{{1, 2}, {0}}));
  EXPECT_TRUE(length_sorted_batches({}, 6).empty());
  EXPECT_THROW(length_sorted_batches({1}, 0), ConfigError);
}

TEST(Batching, PadsToTheLongestWithClsAndMask) {
  std::vector<std::int64_t> a = {10, 11, 12}, b = {20}, c(50, 7);
  TokenBatch t = make_token_batch({&a, &b}, {1, 0}, 10, TokenFrame{{kClsId}, {}, kPadId, kUnkId});
  ASSERT_EQ(t.ids.shape(), (Shape{2, 4}));
  const auto* ids = t.ids.data<std::int64_t>();
  const auto* pad = t.padding.data<std::uint8_t>();
  EXPECT_EQ(std::vector<std::int64_t>(ids, ids + 8), (std::vector<std::int64_t>{kClsId, 10, 11, 12, kClsId, 20, 0, 0}));
  EXPECT_EQ(std::vector<int>(pad, pad + 8), (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(t.tokens, 6);
  TokenBatch cut = make_token_batch({&c}, {0}, 16, TokenFrame{{kClsId}, {}, kPadId, kUnkId});
  EXPECT_EQ(cut.ids.dim(1), 16);
  auto batches = epoch_batches({0, 1, 2, 3, 4}, 2, 1, 0, true);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size(), 1u);
  EXPECT_EQ(epoch_batches({0, 1, 2, 3, 4}, 2, 1, 0, true), batches);
  EXPECT_NE(epoch_batches({0, 1, 2, 3, 4, 5, 6, 7}, 8, 1, 0, true),
            epoch_batches({0, 1, 2, 3, 4, 5, 6, 7}, 8, 1, 1, true));
}

// BERT's frame: [CLS] before, [SEP] after, its own padding id; a sequence
// cut to fit keeps its [SEP] (as `tokenizers` truncates), an empty text is
// [CLS] [SEP].
TEST(Batching, ABertFrameKeepsItsEndWhenASequenceIsCut) {
  const TokenFrame bert{{101}, {102}, 5, 100};
  std::vector<std::int64_t> a = {7, 8, 9, 10, 11}, b = {}, c = {7};
  TokenBatch t = make_token_batch({&a, &b, &c}, {0, 0, 0}, 5, bert);
  ASSERT_EQ(t.ids.shape(), (Shape{3, 5}));
  const auto* ids = t.ids.data<std::int64_t>();
  const auto* pad = t.padding.data<std::uint8_t>();
  EXPECT_EQ(std::vector<std::int64_t>(ids, ids + 15),
            (std::vector<std::int64_t>{101, 7, 8, 9, 102, 101, 102, 5, 5, 5, 101, 7, 102, 5, 5}));
  EXPECT_EQ(std::vector<int>(pad, pad + 15), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(t.tokens, 5 + 2 + 3);
  EXPECT_THROW(make_token_batch({&a}, {0}, 2, bert), ConfigError);  // no room for a token between the two
  // No frame at all: an empty text is one unknown token.
  TokenBatch bare = make_token_batch({&b}, {0}, 4, TokenFrame{{}, {}, kPadId, kUnkId});
  EXPECT_EQ(bare.ids.data<std::int64_t>()[0], kUnkId);
}

// Each example once per epoch; a batch holds examples of similar length; the
// order a pure function of (seed, epoch).
TEST(Batching, LengthGroupedBatchesCoverTheEpochAndPadLittle) {
  std::vector<std::int64_t> indices, lengths;
  Rng rng(3);
  for (std::int64_t i = 0; i < 1000; ++i) {
    indices.push_back(100 + 7 * i);
    lengths.push_back(1 + rng.next_u32() % 30);
  }
  auto length_of = [&](std::int64_t index) { return lengths[static_cast<std::size_t>((index - 100) / 7)]; };
  // Padding: each batch padded to its longest member, over every example.
  auto padded = [&](const std::vector<std::vector<std::int64_t>>& batches) {
    std::int64_t pad = 0;
    for (const auto& b : batches) {
      std::int64_t longest = 0;
      for (auto i : b) longest = std::max(longest, length_of(i));
      for (auto i : b) pad += longest - length_of(i);
    }
    return pad;
  };
  const auto grouped = length_grouped_batches(indices, lengths, 32, 5, 0, 8);
  ASSERT_EQ(grouped.size(), 32u);  // ceil(1000 / 32), as epoch_batches
  std::vector<std::int64_t> seen;
  for (const auto& b : grouped) seen.insert(seen.end(), b.begin(), b.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, indices);
  EXPECT_LT(padded(grouped) * 4, padded(epoch_batches(indices, 32, 5, 0, true)));
  EXPECT_EQ(length_grouped_batches(indices, lengths, 32, 5, 0, 8), grouped);
  EXPECT_NE(length_grouped_batches(indices, lengths, 32, 5, 1, 8), grouped);
  // One pool over everything: the batches are disjoint length ranges.
  for (const auto& a : length_grouped_batches(indices, lengths, 32, 5, 0, 1000))
    for (const auto& b : length_grouped_batches(indices, lengths, 32, 5, 0, 1000)) {
      if (a == b) continue;
      std::int64_t a_lo = 99, a_hi = 0, b_lo = 99, b_hi = 0;
      for (auto i : a) a_lo = std::min(a_lo, length_of(i)), a_hi = std::max(a_hi, length_of(i));
      for (auto i : b) b_lo = std::min(b_lo, length_of(i)), b_hi = std::max(b_hi, length_of(i));
      EXPECT_TRUE(a_hi <= b_lo || b_hi <= a_lo);
    }
  EXPECT_THROW(length_grouped_batches(indices, {1, 2}, 32, 5, 0), ShapeError);
  EXPECT_THROW(length_grouped_batches(indices, lengths, 0, 5, 0), ConfigError);
}

}  // namespace
}  // namespace multihead
