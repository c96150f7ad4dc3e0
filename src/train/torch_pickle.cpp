// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/torch_pickle.h"

#include <zip.h>

#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

// --- The zip archive (libzip) ---------------------------------------------------

class ZipArchive {
 public:
  // Over `bytes`, which must outlive it; `path` names it in errors.
  ZipArchive(const std::string& bytes, const std::string& path) : path_(path) {
    zip_error_t e;
    zip_error_init(&e);
    zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &e);
    if (src != nullptr) {
      zip_ = zip_open_from_source(src, ZIP_RDONLY, &e);
      if (zip_ == nullptr) zip_source_free(src);
    }
    const std::string why = zip_ == nullptr ? zip_error_strerror(&e) : "";
    zip_error_fini(&e);
    check<IoError>(zip_ != nullptr, "{}: not a torch.save zip ({}); PyTorch's format before 1.6 is not read", path,
                   why);
  }
  ~ZipArchive() { zip_discard(zip_); }
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  // The entry whose name ends in `suffix` under the archive's one top folder.
  std::optional<std::string> find(const std::string& suffix) const {
    const zip_int64_t n = zip_get_num_entries(zip_, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(zip_, static_cast<zip_uint64_t>(i), 0);
      if (name == nullptr) continue;
      const std::string s = name;
      const std::size_t slash = s.find('/');
      if (slash != std::string::npos && s.substr(slash + 1) == suffix) return s;
    }
    return std::nullopt;
  }

  std::string read(const std::string& name) const {
    zip_stat_t st;
    check<IoError>(zip_stat(zip_, name.c_str(), 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE), "{}: has no entry '{}'",
                   path_, name);
    zip_file_t* f = zip_fopen(zip_, name.c_str(), 0);
    check<IoError>(f != nullptr, "{}: cannot open its entry '{}'", path_, name);
    std::string bytes(static_cast<std::size_t>(st.size), '\0');
    const zip_int64_t got = zip_fread(f, bytes.data(), st.size);
    zip_fclose(f);
    check<IoError>(got == static_cast<zip_int64_t>(st.size), "{}: its entry '{}' is cut short", path_, name);
    return bytes;
  }

 private:
  std::string path_;
  zip_t* zip_ = nullptr;
};

// --- The objects a state_dict's pickle is made of ------------------------------

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Global {
  std::string module, name;
  std::string qualified() const { return module + "." + name; }
};
struct Storage {
  std::string key, type;  // "0", "FloatStorage"
  std::int64_t numel = 0;
};
struct TensorView {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;
  Shape size, stride;
};
struct Dict {
  std::vector<std::pair<ValuePtr, ValuePtr>> items;  // in insertion order, as an OrderedDict
};
using Items = std::vector<ValuePtr>;
struct Tuple {
  Items items;
};
struct List {
  Items items;
};

struct Value {
  std::variant<std::monostate, bool, std::int64_t, double, std::string, Tuple, List, Dict, Global,
               std::shared_ptr<Storage>, TensorView>
      v;
};

template <typename T>
ValuePtr make(T x) {
  auto p = std::make_shared<Value>();
  p->v = std::move(x);
  return p;
}

// What a state_dict may refer to, and nothing else (torch.load(weights_only=True)'s allowlist, cut to
// the state_dicts of transformers' checkpoints).
bool allowed(const Global& g) {
  if (g.module == "collections" && g.name == "OrderedDict") return true;
  if (g.module == "torch._utils" && (g.name == "_rebuild_tensor_v2" || g.name == "_rebuild_parameter")) return true;
  static const char* kStorages[] = {"FloatStorage", "HalfStorage",  "BFloat16Storage", "DoubleStorage", "LongStorage",
                                    "IntStorage",   "ShortStorage", "CharStorage",     "ByteStorage",   "BoolStorage"};
  if (g.module == "torch")
    for (const char* s : kStorages)
      if (g.name == s) return true;
  return false;
}

// --- The pickle machine ------------------------------------------------------------

class Unpickler {
 public:
  Unpickler(std::string_view bytes, std::string source) : in_(bytes), source_(std::move(source)) {}

  ValuePtr run() {
    while (true) {
      const auto op = static_cast<unsigned char>(byte());
      switch (op) {
        case 0x80: byte(); break;                                // PROTO
        case 0x95: take(8); break;                               // FRAME
        case '}': push(make(Dict{})); break;                     // EMPTY_DICT
        case ']': push(make(List{})); break;                     // EMPTY_LIST
        case ')': push(make(Tuple{})); break;                    // EMPTY_TUPLE
        case '(': marks_.push_back(stack_.size()); break;        // MARK
        case 'q': memo_[le(1)] = top(); break;                   // BINPUT
        case 'r': memo_[le(4)] = top(); break;                   // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;           // MEMOIZE
        case 'h': push(get(le(1))); break;                       // BINGET
        case 'j': push(get(le(4))); break;                       // LONG_BINGET
        case 'X': push(make(std::string(take(le(4))))); break;   // BINUNICODE
        case 0x8c: push(make(std::string(take(le(1))))); break;  // SHORT_BINUNICODE
        case 0x8d: push(make(std::string(take(le(8))))); break;  // BINUNICODE8
        case 'T':
        case 'B': push(make(std::string(take(le(4))))); break;  // BINSTRING, BINBYTES
        case 'U':
        case 'C': push(make(std::string(take(le(1))))); break;  // SHORT_BINSTRING, SHORT_BINBYTES
        case 'c': {                                             // GLOBAL
          Global g{line(), ""};
          g.name = line();
          push(global(std::move(g)));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          std::string name = as<std::string>(pop(), "a global's name");
          std::string module = as<std::string>(pop(), "a global's module");
          push(global({std::move(module), std::move(name)}));
          break;
        }
        case 'Q': push(persistent(pop())); break;                                                  // BINPERSID
        case 'J': push(make(static_cast<std::int64_t>(static_cast<std::int32_t>(le(4))))); break;  // BININT
        case 'K': push(make(static_cast<std::int64_t>(le(1)))); break;                             // BININT1
        case 'M': push(make(static_cast<std::int64_t>(le(2)))); break;                             // BININT2
        case 0x8a: push(make(long1())); break;                                                     // LONG1
        case 'G': {  // BINFLOAT, big-endian
          std::uint64_t bits = 0;
          for (unsigned char c : take(8)) bits = bits << 8 | c;
          push(make(std::bit_cast<double>(bits)));
          break;
        }
        case 0x88: push(make(true)); break;                // NEWTRUE
        case 0x89: push(make(false)); break;               // NEWFALSE
        case 'N': push(make(std::monostate{})); break;     // NONE
        case 't': push(make(Tuple{since_mark()})); break;  // TUPLE
        case 'l': push(make(List{since_mark()})); break;   // LIST
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
          Items items(static_cast<std::size_t>(op - 0x84));
          for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
          push(make(Tuple{std::move(items)}));
          break;
        }
        case 'a': {  // APPEND
          ValuePtr x = pop();
          list(top()).push_back(std::move(x));
          break;
        }
        case 'e': {  // APPENDS
          Items items = since_mark();
          Items& l = list(top());
          l.insert(l.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM
          ValuePtr v = pop(), k = pop();
          dict(top()).items.emplace_back(std::move(k), std::move(v));
          break;
        }
        case 'u': {  // SETITEMS
          Items items = since_mark();
          check<IoError>(items.size() % 2 == 0, "{}: SETITEMS over an odd number of items", source_);
          Dict& d = dict(top());
          for (std::size_t i = 0; i < items.size(); i += 2) d.items.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'R': {  // REDUCE
          ValuePtr args = pop(), callable = pop();
          push(reduce(as<Global>(callable, "a callable"), as<Tuple>(args, "the arguments of a call").items));
          break;
        }
        case 'b': {  // BUILD: a state_dict's _metadata, not read
          pop();
          check<IoError>(std::holds_alternative<Dict>(top()->v) || std::holds_alternative<TensorView>(top()->v),
                         "{}: its pickle sets the state of an object a state_dict does not hold", source_);
          break;
        }
        case '.': return pop();  // STOP
        default:
          throw IoError(
              fmt::format("{}: its pickle has opcode 0x{:02x}, which a state_dict's does not use; it is "
                          "not read",
                          source_, op));
      }
    }
  }

 private:
  char byte() {
    check<IoError>(at_ < in_.size(), "{}: its pickle ends before STOP", source_);
    return in_[at_++];
  }
  std::string_view take(std::uint64_t n) {
    check<IoError>(n <= in_.size() - at_, "{}: its pickle ends inside a value", source_);
    const std::string_view s = in_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  std::uint64_t le(int n) {  // an n-byte little-endian unsigned integer
    const std::string_view b = take(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
    return v;
  }
  std::int64_t long1() {
    const std::uint64_t n = le(1);
    check<IoError>(n <= 8, "{}: its pickle holds an integer of {} bytes", source_, n);
    if (n == 0) return 0;
    const std::uint64_t v = le(static_cast<int>(n));
    const int shift = 64 - 8 * static_cast<int>(n);
    return static_cast<std::int64_t>(v << shift) >> shift;  // sign-extended
  }
  std::string line() {
    const std::size_t end = in_.find('\n', at_);
    check<IoError>(end != std::string_view::npos, "{}: its pickle ends inside a global's name", source_);
    std::string s(in_.substr(at_, end - at_));
    at_ = end + 1;
    return s;
  }

  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop() {
    check<IoError>(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()),
                   "{}: its pickle pops an empty stack", source_);
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const ValuePtr& top() const {
    check<IoError>(!stack_.empty(), "{}: its pickle reads an empty stack", source_);
    return stack_.back();
  }
  Items since_mark() {
    check<IoError>(!marks_.empty() && marks_.back() <= stack_.size(), "{}: its pickle has no MARK there", source_);
    Items items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  ValuePtr get(std::uint64_t i) const {
    const auto it = memo_.find(i);
    check<IoError>(it != memo_.end(), "{}: its pickle reads memo {}, never written", source_, i);
    return it->second;
  }

  template <typename T>
  T& as(const ValuePtr& v, const char* what) const {
    T* p = std::get_if<T>(&v->v);
    check<IoError>(p != nullptr, "{}: its pickle has something else where {} should be", source_, what);
    return *p;
  }
  Items& list(const ValuePtr& v) const { return as<List>(v, "a list").items; }
  Dict& dict(const ValuePtr& v) const { return as<Dict>(v, "a dict"); }

  // A reference to code: refused here, before anything could call it, unless a state_dict holds it.
  ValuePtr global(Global g) const {
    check<IoError>(allowed(g),
                   "{}: its pickle refers to {}, which a state_dict does not hold; it is not read (a pickle can run "
                   "code)",
                   source_, g.qualified());
    return make(std::move(g));
  }

  // ('storage', torch.FloatStorage, key, location, numel): a storage in the archive's data folder.
  ValuePtr persistent(const ValuePtr& pid) const {
    const Items& t = as<Tuple>(pid, "a storage's persistent id").items;
    check<IoError>(t.size() == 5 && as<std::string>(t[0], "'storage'") == "storage",
                   "{}: its pickle holds a persistent id that is not a storage", source_);
    auto s = std::make_shared<Storage>();
    s->type = as<Global>(t[1], "a storage type").name;
    s->key = as<std::string>(t[2], "a storage key");
    s->numel = as<std::int64_t>(t[4], "a storage size");
    check<IoError>(s->numel >= 0, "{}: a storage of negative size", source_);
    return make(std::move(s));
  }

  Shape ints(const ValuePtr& v, const char* what) const {
    Shape out;
    for (const ValuePtr& x : as<Tuple>(v, what).items) out.push_back(as<std::int64_t>(x, what));
    return out;
  }

  ValuePtr reduce(const Global& g, Items& args) const {
    if (g.name == "OrderedDict") {
      check<IoError>(args.empty(), "{}: OrderedDict called with arguments", source_);
      return make(Dict{});
    }
    if (g.name == "_rebuild_parameter") {  // (data, requires_grad, backward_hooks)
      check<IoError>(!args.empty(), "{}: _rebuild_parameter called without its tensor", source_);
      as<TensorView>(args[0], "a parameter's tensor");
      return args[0];
    }
    if (g.name == "_rebuild_tensor_v2") {  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
      check<IoError>(args.size() >= 4, "{}: _rebuild_tensor_v2 called with {} arguments", source_, args.size());
      TensorView t{as<std::shared_ptr<Storage>>(args[0], "a tensor's storage"),
                   as<std::int64_t>(args[1], "a tensor's offset"), ints(args[2], "a tensor's size"),
                   ints(args[3], "a tensor's stride")};
      check<IoError>(t.size.size() == t.stride.size() && t.offset >= 0,
                     "{}: a tensor's size and stride differ in length", source_);
      return make(std::move(t));
    }
    throw IoError(fmt::format("{}: its pickle calls {}, which a state_dict does not", source_, g.qualified()));
  }

  std::string_view in_;
  std::size_t at_ = 0;
  std::string source_;
  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, ValuePtr> memo_;
};

// --- Tensors out of their storages -----------------------------------------------

struct StorageType {
  const char* name;
  std::size_t bytes;
  std::optional<DType> dtype;  // multihead's, where it has one
};

const StorageType& storage_type(const std::string& name, const std::string& tensor, const std::string& source) {
  static const StorageType kTypes[] = {{"FloatStorage", 4, DType::kF32},     {"HalfStorage", 2, DType::kF16},
                                       {"BFloat16Storage", 2, DType::kBF16}, {"LongStorage", 8, DType::kI64},
                                       {"BoolStorage", 1, DType::kBool},     {"DoubleStorage", 8, std::nullopt},
                                       {"IntStorage", 4, std::nullopt},      {"ShortStorage", 2, std::nullopt},
                                       {"CharStorage", 1, std::nullopt},     {"ByteStorage", 1, std::nullopt}};
  for (const StorageType& t : kTypes) {
    if (name != t.name) continue;
    check<IoError>(t.dtype.has_value(),
                   "{}: '{}' is a {}, which is not read (float32, float16, bfloat16, int64 "
                   "and bool are)",
                   source, tensor, name);
    return t;
  }
  throw IoError(fmt::format("{}: '{}' has a storage of type {}", source, tensor, name));
}

// The elements of view `t` of storage bytes `data`, in row-major order.
Tensor materialise(const TensorView& t, const std::string& data, const StorageType& type, const std::string& name,
                   const std::string& source) {
  check<IoError>(static_cast<std::uint64_t>(t.storage->numel) <= data.size() / type.bytes,
                 "{}: the storage of '{}' holds {} bytes, fewer than its {} elements", source, name, data.size(),
                 t.storage->numel);
  // The view within its storage, and no larger than it (a state_dict's tensors do not repeat elements): a
  // small file cannot ask for a large tensor.
  std::int64_t n = 1, last = t.offset;  // last: the furthest element the view reaches
  bool fits = true;
  for (std::size_t k = 0; k < t.size.size() && fits; ++k) {
    std::int64_t reach = 0;
    fits = t.size[k] >= 0 && t.stride[k] >= 0 && !__builtin_mul_overflow(t.size[k], n, &n) &&
           (t.size[k] == 0 || (!__builtin_mul_overflow(t.size[k] - 1, t.stride[k], &reach) &&
                               !__builtin_add_overflow(last, reach, &last)));
  }
  check<IoError>(fits && (n == 0 || (last < t.storage->numel && n <= t.storage->numel)),
                 "{}: '{}' of size {} reaches past its storage of {} elements", source, name, shape_text(t.size),
                 t.storage->numel);
  Tensor out(t.size, *type.dtype);
  if (n == 0) return out;
  auto* dst = static_cast<char*>(out.raw());
  std::vector<std::int64_t> index(t.size.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t at = t.offset;
    for (std::size_t k = 0; k < index.size(); ++k) at += index[k] * t.stride[k];
    std::memcpy(dst + static_cast<std::size_t>(i) * type.bytes, data.data() + static_cast<std::size_t>(at) * type.bytes,
                type.bytes);
    for (std::size_t k = index.size(); k-- > 0;) {  // the next index, last dimension fastest
      if (++index[k] < t.size[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

}  // namespace

TensorMap read_torch_state_dict(const std::string& path) {
  return parse_torch_state_dict(read_file(path, kMaxWeightsBytes), path);
}

TensorMap parse_torch_state_dict(const std::string& bytes, const std::string& path) {
  const ZipArchive zip(bytes, path);
  const std::optional<std::string> pickle = zip.find("data.pkl");
  check<IoError>(pickle.has_value(), "{}: a zip without data.pkl, not one torch.save wrote", path);
  const std::string prefix = pickle->substr(0, pickle->size() - std::strlen("data.pkl"));
  if (const std::optional<std::string> order = zip.find("byteorder"))
    check<IoError>(zip.read(*order) == "little", "{}: its tensors are big-endian, which is not read", path);
  const std::string pickled = zip.read(*pickle);
  const ValuePtr root = Unpickler(pickled, path).run();
  const Dict* dict = std::get_if<Dict>(&root->v);
  check<IoError>(dict != nullptr, "{}: its pickle is not a state_dict (a dict of tensors)", path);
  TensorMap out;
  std::map<std::string, std::string> storages;  // key -> bytes, each read once
  for (const auto& [k, v] : dict->items) {
    const std::string* name = std::get_if<std::string>(&k->v);
    check<IoError>(name != nullptr, "{}: its state_dict has a key that is not a string", path);
    const TensorView* t = std::get_if<TensorView>(&v->v);
    check<IoError>(t != nullptr, "{}: '{}' is not a tensor", path, *name);
    const StorageType& type = storage_type(t->storage->type, *name, path);
    auto it = storages.find(t->storage->key);
    if (it == storages.end())
      it = storages.emplace(t->storage->key, zip.read(prefix + "data/" + t->storage->key)).first;
    check<IoError>(!out.contains(*name), "{}: '{}' twice in its state_dict", path, *name);
    out[*name] = materialise(*t, it->second, type, *name, path);
  }
  return out;
}

}  // namespace multihead
