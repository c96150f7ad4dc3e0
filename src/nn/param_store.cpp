#include "multihead/nn/param_store.h"

namespace multihead {

ParamStore::Handle ParamStore::add(std::string name, Shape shape) {
  check(!finalized_, "cannot add parameter '{}' after the parameter store is finalized", name);
  check(!find(name).has_value(), "duplicate parameter name '{}'", name);
  Entry e{std::move(name), std::move(shape), total_, 0};
  e.numel = shape_numel(e.shape);
  total_ += e.numel;
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

void ParamStore::finalize() {
  check(!finalized_, "parameter store is already finalized");
  data_ = Tensor({total_});
  grad_ = Tensor({total_});
  finalized_ = true;
}

void ParamStore::require_finalized() const {
  check(finalized_, "parameter store used before finalize()");
}

float* ParamStore::data(Handle h) {
  require_finalized();
  return data_.f32() + entries_.at(h).offset;
}
float* ParamStore::grad(Handle h) {
  require_finalized();
  return grad_.f32() + entries_.at(h).offset;
}
const float* ParamStore::data(Handle h) const {
  require_finalized();
  return data_.f32() + entries_.at(h).offset;
}
const float* ParamStore::grad(Handle h) const {
  require_finalized();
  return grad_.f32() + entries_.at(h).offset;
}
std::span<float> ParamStore::data_span(Handle h) {
  return {data(h), static_cast<std::size_t>(entries_.at(h).numel)};
}

std::optional<ParamStore::Handle> ParamStore::find(std::string_view name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  return std::nullopt;
}

std::span<float> ParamStore::all_data() {
  require_finalized();
  return data_.span_f32();
}
std::span<float> ParamStore::all_grads() {
  require_finalized();
  return grad_.span_f32();
}
void ParamStore::zero_grad() {
  require_finalized();
  grad_.zero();
}

}  // namespace multihead
