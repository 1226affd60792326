#pragma once
// The in-process rooflines live in the library (kvphase-bench and bench/gbench.hpp use them too).
#include <kvphase/bench/roofline.hpp>
