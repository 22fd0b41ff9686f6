// NameIndex: tensor names (views the caller keeps alive) to int32, an open-addressing table. The importer looks
// every name of a graph up several times (a decoder of 10^5 nodes: 10^6 look-ups of names some 50 characters long);
// std::unordered_map's node per entry made those look-ups a cache miss each. Look-ups only: no iteration order.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace memplan {

class NameIndex {
 public:
  explicit NameIndex(size_t expected = 0) { reserve(expected); }

  // Room for `expected` names without growing.
  void reserve(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }
  size_t size() const { return size_; }

  // The value of `name`, or nullptr.
  const int32_t* find(std::string_view name) const {
    const size_t h = std::hash<std::string_view>{}(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.data) return nullptr;
      if (s.hash == h && s.size == name.size() && std::string_view(s.data, s.size) == name) return &s.value;
    }
  }
  int32_t* find(std::string_view name) {
    return const_cast<int32_t*>(static_cast<const NameIndex*>(this)->find(name));
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  // As std::unordered_map::emplace: `name` -> `value` unless `name` is there; the stored value and whether it was
  // inserted.
  std::pair<int32_t*, bool> emplace(std::string_view name, int32_t value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
    const size_t h = std::hash<std::string_view>{}(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.data) {
        s = Slot{h, name.data() ? name.data() : "", name.size(), value};
        ++size_;
        return {&s.value, true};
      }
      if (s.hash == h && s.size == name.size() && std::string_view(s.data, s.size) == name) return {&s.value, false};
    }
  }
  // As std::unordered_map::operator[] (a new name's value 0).
  int32_t& operator[](std::string_view name) { return *emplace(name, 0).first; }

 private:
  struct Slot {
    size_t hash = 0;
    const char* data = nullptr;  // nullptr: empty
    size_t size = 0;
    int32_t value = 0;
  };
  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (!s.data) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].data) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace memplan
