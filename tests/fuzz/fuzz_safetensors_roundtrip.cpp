// SPDX-License-Identifier: Apache-2.0
// Structured round trip: tensors built from the input (count, names, dtypes,
// shapes, values) are serialised, parsed back, and must come back equal.
#include <cstring>
#include <map>

#include "fuzz_target.h"
#include "multihead/io/safetensors.h"

namespace {

struct Bytes {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  Bytes in{data, size};
  std::map<std::string, Tensor> tensors;
  const int count = in.next() % 5;
  for (int t = 0; t < count; ++t) {
    std::string name;
    for (int c = 1 + in.next() % 8; c > 0; --c) name += static_cast<char>(in.next());
    const DType dts[] = {DType::kF32, DType::kBool, DType::kI64};
    const DType dt = dts[in.next() % 3];
    Shape shape;
    for (int d = in.next() % 4; d > 0; --d) shape.push_back(in.next() % 5);
    Tensor x(shape, dt);
    auto* raw = static_cast<std::uint8_t*>(x.raw());
    for (std::size_t b = 0; b < x.nbytes(); ++b) raw[b] = in.next();
    if (dt == DType::kBool)
      for (std::size_t b = 0; b < x.nbytes(); ++b) raw[b] &= 1;
    tensors[name] = std::move(x);
  }
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
  std::string bytes;
  try {
    bytes = serialize_safetensors(list, {});
  } catch (const Error&) {
    return 0;  // a name the format cannot hold (e.g. not UTF-8) is refused, not written
  }
  const SafetensorsFile f = SafetensorsFile::parse(bytes, "roundtrip");
  if (f.entries().size() != tensors.size()) __builtin_trap();
  for (const auto& [name, t] : tensors) {
    const Tensor back = f.tensor(name);
    if (back.shape() != t.shape() || back.dtype() != t.dtype() ||
        (t.nbytes() > 0 && std::memcmp(back.raw(), t.raw(), t.nbytes()) != 0))
      __builtin_trap();
  }
  return 0;
}
