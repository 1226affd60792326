// libFuzzer target: the .npy reader (io::npy_view over the input bytes). What it accepts must
// convert every element, and re-encoding those values (dtype, shape, order and byte order kept)
// must read back to the same values.
#include <kvphase/io/npy.hpp>

#include <cmath>
#include <span>
#include <vector>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = kvphase::io;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kvphase::fuzz::expect_result_or_error([&] {
    const io::npy_view v(bytes, "fuzz.npy");
    kvphase::fuzz::check(v.header.data_offset + v.header.data_bytes == size, "data part spans the rest of the file");
    if (v.header.dtype == io::tensor_dtype::boolean || !io::is_float_dtype(v.header.dtype)) return;
    const auto vals = v.values<double>();
    kvphase::fuzz::check(vals.size() == v.count(), "one value per element");
    const auto again =
        io::npy_bytes<double>(vals, v.header.shape, v.header.dtype,
                              {.fortran_order = v.header.fortran_order, .big_endian = v.header.big_endian});
    const auto back = io::npy_view(again, "again.npy").values<double>();
    for (std::size_t i = 0; i < vals.size(); ++i)
      kvphase::fuzz::check(back[i] == vals[i] || (std::isnan(back[i]) && std::isnan(vals[i])), "npy round trip");
  });
  return 0;
}
