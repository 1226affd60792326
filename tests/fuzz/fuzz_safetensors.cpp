// libFuzzer target: the safetensors reader (io::safetensors_view over the input bytes). What it
// accepts must have every tensor inside the data and readable (block-scaled F8 dequantised or
// an error naming the scale), and the writer must reproduce the same tensors.
#include <kvphase/io/safetensors.hpp>

#include <cmath>
#include <span>
#include <vector>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kvphase::fuzz::expect_result_or_error([&] {
    const io::safetensors_view v(bytes, "fuzz.safetensors");
    io::safetensors_writer w;
    for (const auto& t : v.tensors()) {
      kvphase::fuzz::check(t.end <= v.header().data_size && t.begin <= t.end, "tensor inside the data");
      const auto raw = v.raw(t.name);
      kvphase::fuzz::check(raw.size() == t.count() * io::dtype_size(t.dtype), "byte range = shape x item size");
      w.add_raw(t.name, t.dtype, t.shape, raw);
    }
    for (const auto& [k, val] : v.header().metadata) w.metadata(k, val);
    const auto again = w.bytes();
    const io::safetensors_view back(again, "again.safetensors");
    kvphase::fuzz::check(back.tensors().size() == v.tensors().size(), "same tensor count");
    for (const auto& t : v.tensors()) {
      const auto a = v.raw(t.name), b = back.raw(t.name);
      kvphase::fuzz::check(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin()), "same bytes");
    }
    for (const auto& t : v.tensors())
      if (t.count() <= 4096) (void)v.values<double>(t.name);  // may throw for a bad F8 scale
  });
  return 0;
}
