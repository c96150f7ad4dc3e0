// SPDX-License-Identifier: Apache-2.0
// Synthetic tasks and IDX files.
#include <gtest/gtest.h>

#include <zlib.h>

#include "multihead/data/idx.h"
#include "multihead/data/synthetic.h"
#include "multihead/data/tokenizer.h"

namespace multihead {
namespace {

TEST(Synthetic, ReverseSortAndCopyAnswersAreScoredOnly) {
  for (auto kind : {SyntheticKind::kCopy, SyntheticKind::kReverse, SyntheticKind::kSort}) {
    SyntheticTask task{kind, 6, 3, 7};
    SyntheticBatch b = synthetic_batch(task, 5, 1, 0);
    const std::int64_t T = b.ids.dim(1);
    for (std::int64_t r = 0; r < 5; ++r) {
      const std::int64_t* ids = b.ids.data<std::int64_t>() + r * T;
      const std::int64_t* tg = b.targets.data<std::int64_t>() + r * T;
      ASSERT_EQ(ids[0], kClsId);
      std::int64_t n = 1;
      while (ids[n] != kEosId) ++n;
      std::vector<std::int64_t> x(ids + 1, ids + n), y;
      EXPECT_GE(static_cast<std::int64_t>(x.size()), 3);
      EXPECT_LE(static_cast<std::int64_t>(x.size()), 7);
      for (std::int64_t t = 0; t < n; ++t) EXPECT_EQ(tg[t], kIgnoreIndex);
      for (std::int64_t t = n; t < n + static_cast<std::int64_t>(x.size()); ++t) y.push_back(tg[t]);
      EXPECT_EQ(tg[n + static_cast<std::int64_t>(x.size())], kEosId);
      std::vector<std::int64_t> want = x;
      if (kind == SyntheticKind::kReverse) std::reverse(want.begin(), want.end());
      if (kind == SyntheticKind::kSort) std::sort(want.begin(), want.end());
      EXPECT_EQ(y, want);
      for (auto v : x) EXPECT_TRUE(v >= 4 && v < task.vocab_size());
    }
  }
  SyntheticTask t{SyntheticKind::kReverse, 5, 2, 4};
  EXPECT_EQ(synthetic_batch(t, 3, 9, 4).ids.numel(), synthetic_batch(t, 3, 9, 4).ids.numel());
  EXPECT_THROW(parse_synthetic_kind("shuffle"), ConfigError);
}

std::string idx_bytes(const std::vector<std::uint8_t>& dims_and_data, int dims) {
  std::string s = {0, 0, 8, static_cast<char>(dims)};
  s.append(dims_and_data.begin(), dims_and_data.end());
  return s;
}

TEST(Idx, ReadsPlainAndGzipAndRejectsBadFiles) {
  // (2, 3) bytes 1..6
  const std::string plain = idx_bytes({0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6}, 2);
  IdxArray a = parse_idx(plain, "a.idx");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.data[5], 6);
  // gzip the same bytes
  std::string gz(256, '\0');
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(gz.data());
  zs.avail_out = static_cast<uInt>(gz.size());
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  EXPECT_EQ(parse_idx(gz, "a.idx.gz").data, a.data);
  auto err = [](const std::string& bytes) {
    try {
      parse_idx(bytes, "f");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("PK\x03\x04"), "f: not an IDX file (bad magic)");
  EXPECT_EQ(err(std::string("\0\0\x0d\x01\0\0\0\x01", 8) + "abcd"),
            "f: IDX element type 0x0d is not supported (only unsigned bytes, 0x08)");
  EXPECT_EQ(err(plain.substr(0, plain.size() - 1)), "f: IDX data is 5 bytes, the header says 6");
  EXPECT_EQ(err(gz.substr(0, gz.size() / 2)), "f: corrupt or truncated gzip data");
  EXPECT_EQ(err(idx_bytes({0, 0, 0, 2}, 2)), "f: truncated IDX header");
}

}  // namespace
}  // namespace multihead
